"""Reload what the target saved, on the reference device, in a process WITHOUT torchferry.

Run by ``torchferry.check.exit`` as a plain script (``runpy.run_path``) with
``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` and torchferry off the path, so that neither this file nor
``import torch`` brings torchferry in; the last thing it records is whether ``torchferry`` is in
``sys.modules``. It imports nothing from torchferry: the rules it shares with torchferry (a
tensor's digest, a model output's tensors) come from ``torchferry/harness/portable.py``, loaded
by its path under another name (the spec's ``portable``).

Two jobs, as the spec's ``kind`` says:

- ``formats`` (a build() workload or a named model): each standard format the target worker saved
  (state dict, safetensors, save_pretrained, optimizer state) is loaded as a user would, the model
  rebuilt with stock torch/transformers, and its outputs on the eval batch computed at the run's
  dtype and in float64, for the parent to judge against the target's own;
- ``checkpoints`` (an unchanged script): each checkpoint the script wrote (a file, or a Hugging Face
  folder with its ``config.json``: a transformers model, or a diffusers one by its ``_class_name``) is
  loaded, and every tensor in it reduced to its digest, for the parent to compare with the target's
  final parameters.

Every file is first loaded with ``torch.load(weights_only=True)`` and no ``map_location``, as a
user would; when that fails, again with a ``map_location`` that records the storages' location tags.

Usage: python -c "import runpy,sys; sys.argv=['exit_loader', SPEC, OUT]; runpy.run_path(LOADER, run_name='__main__')"
"""

import copy
import importlib.util
import json
import sys
import traceback

import torch

portable = None  # torchferry/harness/portable.py, loaded by path in main()


def load_portable(path):
    spec = importlib.util.spec_from_file_location("ferry_portable", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def first_line(exc):
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


# -- loading as a user would ----------------------------------------------------------------------
def load_pickle(path, record):
    """torch.load as a user would (no map_location), then with a map_location that records the storages' tags."""
    try:
        obj = torch.load(path, weights_only=True)
        record["loads_plain"], record["how"] = True, "weights_only"
        return obj
    except Exception as exc:
        record["plain_error"] = first_line(exc)
    tags = set()

    def remember(storage, location):
        tags.add(location)
        return storage  # deserialised on the CPU: it stays there

    obj = torch.load(path, map_location=remember, weights_only=True)
    record["location_tags"], record["how"] = sorted(tags), "map_location"
    return obj


def tensors_of(obj, found):
    """Every tensor in a loaded object (dicts, lists, tuples; a module's state dict)."""
    if isinstance(obj, torch.Tensor):
        found.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            tensors_of(v, found)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            tensors_of(v, found)
    elif isinstance(obj, torch.nn.Module):
        found.extend(obj.state_dict().values())
    return found


def failed(record, exc):
    """A load that failed: its first line, the package it needs, or whether only an unsafe load would read it."""
    record["error"] = first_line(exc)
    if isinstance(exc, ModuleNotFoundError):
        record["needs_package"] = exc.name
    else:
        record["traceback"] = traceback.format_exc()
        # the safe unpickler refused a Python class: the file loads only with weights_only=False (trusted files)
        record["unsafe_only"] = "Unsupported global" in str(exc)


# -- formats: a build() workload or a named model --------------------------------------------------
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
    floating = lambda out: {k: v.detach().cpu() for k, v in portable.flatten(out).items() if v.is_floating_point()}  # noqa: E731
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


def load_format(name, path, spec, record):
    """One saved format as its library loads it: (model, inputs), or (None, None) when there is no model to run."""
    if name == "save_pretrained":
        return load_pretrained(spec["architecture"], path, record)
    if name == "safetensors":
        from safetensors.torch import load_model

        model, inputs = build_architecture(spec["architecture"], spec["exit_dir"])
        load_model(model, path, strict=True)
        record["loads_plain"] = True
        return model, inputs
    if name == "optimizer state":
        state = load_pickle(path, record)
        record["summary"] = f"{len(state.get('state', {}))} parameter states"
        return None, None
    state_dict = load_pickle(path, record)
    model, inputs = build_architecture(spec["architecture"], spec["exit_dir"])
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    if missing or unexpected:
        record["error"] = f"missing keys {sorted(missing)[:5]}, unexpected keys {sorted(unexpected)[:5]}"
        return None, None
    return model, inputs


def formats(spec, out_path):
    results, tensors = {}, {}
    batch = torch.load(spec["eval_batch"], weights_only=True)
    for name, path in spec["formats"].items():
        record = results[name] = {"loads_plain": False, "location_tags": []}
        try:
            model, inputs = load_format(name, path, spec, record)
            if model is not None:
                tensors[name] = evaluate(model, inputs, batch, spec)
        except Exception as exc:
            failed(record, exc)
    torch.save(tensors, out_path + ".pt")
    return {"formats": results}


# -- checkpoints: an unchanged script ---------------------------------------------------------------
def load_folder(path, record):
    with open(f"{path}/config.json") as f:
        raw = json.load(f)
    if "_diffusers_version" in raw:  # a diffusers model (ModelMixin.save_pretrained): its class is in the config
        import diffusers

        cls = getattr(diffusers, raw.get("_class_name", ""), None)
        if cls is None:
            raise ValueError(f"diffusers {diffusers.__version__} has no model class {raw.get('_class_name')!r} "
                             f"(config.json of {path})")
        model = cls.from_pretrained(path)
        record["how"], record["class"] = "from_pretrained", cls.__name__
        return model
    import transformers

    config = transformers.AutoConfig.from_pretrained(path)
    names = list(getattr(config, "architectures", None) or [])
    cls = next((getattr(transformers, n) for n in names if hasattr(transformers, n)), transformers.AutoModel)
    model = cls.from_pretrained(path)
    record["how"], record["class"] = "from_pretrained", cls.__name__
    return model


def load_checkpoint(path, record):
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file

        record["how"] = "safetensors"
        return load_file(path, device="cpu")
    return load_pickle(path, record)


def checkpoints(spec, out_path):
    results = []
    for item in spec["checkpoints"]:
        record = {"path": item["path"], "kind": item["kind"], "how": None, "plain_error": None, "error": None,
                  "digests": [], "location_tags": []}
        results.append(record)
        try:
            obj = load_folder(item["path"], record) if item["kind"] == "folder" else load_checkpoint(item["path"], record)
            record["digests"] = [portable.digest(t) for t in tensors_of(obj, [])]
        except Exception as exc:
            failed(record, exc)
    return {"checkpoints": results}


def main(spec_path, out_path):
    global portable
    spec = json.loads(open(spec_path).read())
    portable = load_portable(spec["portable"])
    summary = (formats if spec["kind"] == "formats" else checkpoints)(spec, out_path)
    summary["torchferry_absent"] = not any(m.split(".")[0] == "torchferry" for m in sys.modules)
    with open(out_path + ".json", "w") as f:
        json.dump(summary, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
