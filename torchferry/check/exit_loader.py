"""Reload what the target saved, on the reference device, in a process WITHOUT torchferry.

Run by ``torchferry.check.exit`` as a plain script (``runpy.run_path``) with
``TORCH_DEVICE_BACKEND_AUTOLOAD=0``, so that neither this file nor ``import torch`` brings
torchferry in; the last thing it records is whether ``torchferry`` is in ``sys.modules``.
It therefore imports nothing from torchferry and repeats the two small protocol rules it
needs (how to call the model, how to name its output tensors).

Usage: python -c "import runpy,sys; sys.argv=['exit_loader', SPEC, OUT]; runpy.run_path(LOADER, run_name='__main__')"
"""

import copy
import importlib.util
import json
import sys
import traceback

import torch


def flatten(output, prefix=""):
    if isinstance(output, torch.Tensor):
        return {prefix or "output": output}
    items = output.items() if hasattr(output, "items") else enumerate(output) if isinstance(output, (tuple, list)) else []
    found = {}
    for key, value in items:
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, torch.Tensor):
            found[name] = value
        elif isinstance(value, (tuple, list, dict)) and not prefix:
            found.update(flatten(value, name))
    return found


def build_architecture(arch, exit_dir):
    """A model with the target's architecture and fresh weights, plus how to call it."""
    if arch["kind"] == "transformers":
        import transformers

        config = transformers.AutoConfig.from_pretrained(exit_dir)
        return getattr(transformers, arch["class"])(config), None
    for folder in reversed(arch.get("paths", [])):  # the workload's own imports, as in the workers
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location("ferry_exit_workload", arch["path"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    built = getattr(module, arch["attr"])(**arch.get("options", {}))
    if isinstance(built, (tuple, list)):
        return built[0], None
    get = built.get if isinstance(built, dict) else (lambda k, d=None: getattr(built, k, d))
    return get("model"), get("inputs")


def call(model, inputs, batch):
    if inputs is not None:
        return model(*inputs(batch))
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def cast(batch, dtype, device):
    move = lambda t: t.to(device=device, dtype=dtype) if t.is_floating_point() else t.to(device)  # noqa: E731
    if isinstance(batch, dict):
        return {k: move(v) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(move(v) for v in batch)
    return move(batch)


def evaluate(model, inputs, batch, spec):
    """Outputs at the run's dtype and the float64 golden outputs, both on the reference device."""
    device = torch.device(spec["device"])
    model = model.to(device).eval()
    floating = lambda out: {k: v.detach().cpu() for k, v in flatten(out).items() if v.is_floating_point()}  # noqa: E731
    with torch.no_grad():
        if spec["dtype"] == "float32":
            outputs = floating(call(model, inputs, cast(batch, None, device)))
        else:
            with torch.autocast(device_type=device.type, dtype=getattr(torch, spec["dtype"])):
                outputs = floating(call(model, inputs, cast(batch, None, device)))
        golden = floating(call(copy.deepcopy(model).double(), inputs, cast(batch, torch.float64, device)))
    return {"outputs": outputs, "golden": golden}


def load_pretrained(arch, path, record):
    """``from_pretrained`` of the model's own class (transformers, diffusers, peft, ...), or a skip with the reason."""
    import importlib
    import inspect

    loader = arch["pretrained"]
    cls = importlib.import_module(loader["module"])
    for part in loader["class"].split("."):
        cls = getattr(cls, part)
    needed = [p.name for p in list(inspect.signature(cls.from_pretrained).parameters.values())
              if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(needed) > 1:  # e.g. peft's PeftModel.from_pretrained(model, model_id): it needs the base model too
        record["skipped"] = (f"{loader['class']}.from_pretrained needs {', '.join(needed)}: the saved folder alone "
                             "does not rebuild the model; reload it with the base model, as its library documents")
        return None, None
    model = cls.from_pretrained(path)
    record["loads_plain"] = True
    _, inputs = build_architecture(arch, None) if arch["kind"] == "file" else (None, None)
    return model, inputs


def load_pickle(path, record):
    """torch.load as a user would (no map_location), then with a recording map_location."""
    try:
        obj = torch.load(path, weights_only=True)
        record["loads_plain"] = True
    except Exception as exc:
        record["plain_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    tags = set()

    def remember(storage, location):
        tags.add(location)
        return storage

    obj = torch.load(path, map_location=remember, weights_only=True)
    record["location_tags"] = sorted(tags)
    return obj


def main(spec_path, out_path):
    spec = json.loads(open(spec_path).read())
    results, tensors = {}, {}
    batch = torch.load(spec["eval_batch"], weights_only=True)
    for name, path in spec["formats"].items():
        record = {"loads_plain": False, "location_tags": []}
        results[name] = record
        try:
            if name == "save_pretrained":
                model, inputs = load_pretrained(spec["architecture"], path, record)
                if model is None:
                    continue
            elif name == "safetensors":
                from safetensors.torch import load_model

                model, inputs = build_architecture(spec["architecture"], spec["exit_dir"])
                load_model(model, path, strict=True)
                record["loads_plain"] = True
            elif name == "optimizer state":
                state = load_pickle(path, record)
                record["summary"] = f"{len(state.get('state', {}))} parameter states"
                continue
            else:
                state_dict = load_pickle(path, record)
                model, inputs = build_architecture(spec["architecture"], spec["exit_dir"])
                missing, unexpected = model.load_state_dict(state_dict, strict=False)
                if missing or unexpected:
                    record["error"] = f"missing keys {sorted(missing)[:5]}, unexpected keys {sorted(unexpected)[:5]}"
                    continue
            tensors[name] = evaluate(model, inputs, batch, spec)
        except ModuleNotFoundError as exc:
            record["needs_package"] = exc.name
            record["error"] = f"ModuleNotFoundError: {exc}"
        except Exception as exc:
            record["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            record["traceback"] = traceback.format_exc()
    torch.save(tensors, out_path + ".pt")
    summary = {"formats": results, "torchferry_absent": not any(m.split(".")[0] == "torchferry" for m in sys.modules)}
    with open(out_path + ".json", "w") as f:
        json.dump(summary, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
