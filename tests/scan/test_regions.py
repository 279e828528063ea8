"""Where the per-step rules look: a model's forward (and what it calls), a training step (the
innermost loop that runs backward or steps an optimizer, or a function that does), and
nowhere else: data loading, evaluation, set-up and per-epoch code stay quiet."""

import textwrap

import pytest

from torchferry.scan.engine import analyse
from torchferry.scan.rules import RULES_BY_ID

STEP_RULES = [RULES_BY_ID["TF020"], RULES_BY_ID["TF021"]]


def found(code: str) -> list[tuple[int, str]]:
    hits, _ = analyse(textwrap.dedent(code), STEP_RULES, fix=False)
    return [(h.line, h.rule.id) for h in hits]


def test_only_the_innermost_loop_running_backward_is_a_step():
    assert found("""
        for epoch in range(3):
            for batch in loader:
                loss = model(batch)
                loss.backward()
                optimizer.step()
                total = loss.item()
            print("epoch", epoch, loss.item())
    """) == [(7, "TF021")]


def test_a_loop_header_runs_once_per_loop():
    assert found("""
        for x in data[data > 0]:
            loss = model(x)
            loss.backward()
    """) == []


def test_a_step_function_and_the_loop_that_calls_it():
    assert found("""
        def train_step(batch):
            loss = model(batch)
            loss.backward()
            optimizer.step()
            return loss, loss.item()

        for batch in loader:
            loss, value = train_step(batch)
            history.append(loss.tolist())
    """) == [(6, "TF021"), (10, "TF021")]


def test_scaler_step_and_accelerator_backward_mark_a_step():
    assert found("""
        for batch in loader:
            accelerator.backward(model(batch))
            print(batch["labels"].item())
        for batch in loader:
            scaler.step(opt)
            print(batch["labels"].item())
    """) == [(4, "TF021"), (7, "TF021")]


def test_trainer_compute_loss_and_lightning_training_step_are_steps():
    assert found("""
        from transformers import Trainer
        import lightning as L
        class MyTrainer(Trainer):
            def compute_loss(self, model, inputs, return_outputs=False):
                outputs = model(**inputs)
                print(outputs.loss)
                return outputs.loss
        class Lit(L.LightningModule):
            def training_step(self, batch, i):
                loss = self.model(batch)
                self.log("loss", loss.item())
                return loss
    """) == [(7, "TF021"), (12, "TF021")]


def test_a_read_every_n_steps_is_the_cure_not_a_finding():
    assert found("""
        for step, batch in enumerate(loader):
            loss = model(batch)
            loss.backward()
            if step % 100 == 0:
                print(f"loss {loss.item():.3f}")
    """) == []


def test_evaluation_without_backward_is_not_a_step():
    assert found("""
        import torch
        with torch.no_grad():
            for batch in loader:
                preds.extend(model(batch).argmax(-1).tolist())
    """) == []


def test_forward_helpers_are_part_of_the_forward():
    assert found("""
        import torch
        def route(x):
            return torch.nonzero(x)
        def prepare(x):
            return torch.nonzero(x)
        class Block(torch.nn.Module):
            def forward(self, x):
                return self._mix(x) + route(x)
            def _mix(self, x):
                return x.unique()
        ids = prepare(data)
    """) == [(4, "TF020"), (11, "TF020")]


@pytest.mark.parametrize("hook", [
    "model.forward = types.MethodType(fwd, model)",
    "model.forward = fwd",
    "handle = model.register_forward_hook(fwd)",
])
def test_a_function_set_as_forward_or_hook_is_a_forward(hook):
    assert found(f"""
        import types, torch
        def fwd(module, x, out=None):
            return torch.nonzero(x)
        {hook}
    """) == [(4, "TF020")]


def test_a_subclass_of_a_module_class_defined_here_is_a_module():
    assert found("""
        import torch.nn as nn
        class Base(nn.Module):
            pass
        class Head(Base):
            def forward(self, x):
                return x.nonzero()
    """) == [(7, "TF020")]


def test_data_loading_is_never_a_region():
    assert found("""
        import torch
        from torch.utils.data import Dataset
        class Tokens(Dataset):
            def __getitem__(self, i):
                x = self.data[i]
                print(x)
                return x[x != 0].unique()
        def collate(batch):
            lengths = torch.tensor([len(b) for b in batch])
            return torch.repeat_interleave(lengths), lengths.tolist()
    """) == []


def test_non_tensor_reads_in_a_forward_are_not_syncs():
    assert found("""
        import torch
        class M(torch.nn.Module):
            def forward(self, x, mask=None, use_cache=False):
                print(x.shape, x.dtype)
                if use_cache:
                    pass
                if mask is not None and self.training:
                    pass
                if x.dim() == 3:
                    pass
                return x
    """) == []


def test_tensor_conditions_and_conversions_in_a_forward_are_syncs():
    assert found("""
        import torch
        class M(torch.nn.Module):
            def forward(self, x):
                if torch.isnan(x).any():
                    pass
                while not (x > 0).all():
                    x = x + 1
                scale = float(x.max())
                return x * scale
    """) == [(5, "TF021"), (7, "TF021"), (9, "TF021")]


def test_a_scalar_written_through_a_mask_is_a_masked_fill():
    assert found("""
        import torch
        class M(torch.nn.Module):
            def forward(self, x, mask):
                x[mask] = 0.0
                x[mask] = float("-inf")
                x[mask] = torch.zeros(3)
                x[mask] += 1
                return x
    """) == [(7, "TF020"), (8, "TF020")]


def test_a_comparison_used_as_an_index_is_a_boolean_mask():
    assert found("""
        import torch
        class M(torch.nn.Module):
            def forward(self, x, labels):
                return x[labels != -100], x[:, x.sum(0) > 0], x[labels]
    """) == [(5, "TF020"), (5, "TF020")]


def test_annotated_and_helper_parameters_are_judged_by_their_annotation():
    assert found("""
        import numpy as np
        import torch
        def _spans(shape: tuple[int, int], length: int, mask: torch.Tensor, rate):
            if length > shape[1]:
                pass
            if rate > 0.5:
                pass
            if mask.any():
                pass
            return np.random.rand(1).item(), np.arange(length).tolist()
        class M(torch.nn.Module):
            def forward(self, x, multimask_output: bool, pad: bool = False):
                if multimask_output or pad:
                    pass
                return _spans(x.shape, 3, x > 0, 0.1)
    """) == [(9, "TF021")]


def test_torch_predicates_return_python_bools():
    assert found("""
        import torch
        class M(torch.nn.Module):
            def forward(self, x):
                if torch.is_autocast_enabled("cpu") or torch.is_grad_enabled():
                    x = x.float()
                return x
    """) == []


def test_one_read_is_one_finding():
    assert found("""
        import torch
        for b in loader:
            out = model(b)
            out.loss.backward()
            assert torch.isfinite(out.loss).item()
            assert torch.equal(out.logits.detach().cpu(), b["expected"])
    """) == [(6, "TF021"), (7, "TF021")]
