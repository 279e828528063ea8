"""Reload the checkpoints an unchanged script wrote, in a fresh reference-device process without torchferry.

Run as a plain file (``python checkpoint_loader.py SPEC OUT``, backend autoload off): it imports no
torchferry module, so what loads here loads on a machine that never had torchferry. Per checkpoint:
``torch.load(weights_only=True)`` first, then with ``map_location`` (the reference device), and for a
Hugging Face folder (``config.json`` beside the weights) ``from_pretrained`` with the class its config
names; a safetensors file is read with ``safetensors.torch.load_file``. Each loaded tensor is reduced
to a sha256 of its dtype, shape and bytes, which the parent compares with the target's final parameters.
"""

import hashlib
import json
import sys
import traceback

import torch


def digest(t):
    cpu = t.detach().to("cpu").contiguous().reshape(-1)
    h = hashlib.sha256(f"{cpu.dtype}{list(t.shape)}".encode())
    if cpu.numel():
        h.update(cpu.view(torch.uint8).numpy().tobytes() if cpu.dtype != torch.bool else cpu.numpy().tobytes())
    return h.hexdigest()


def tensors_of(obj, found, depth=0):
    """Every tensor in a loaded object (dicts, lists, tuples; a module's state dict)."""
    if isinstance(obj, torch.Tensor):
        found.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            tensors_of(v, found, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            tensors_of(v, found, depth + 1)
    elif isinstance(obj, torch.nn.Module):
        found.extend(obj.state_dict().values())
    return found


def first_line(exc):
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def load_file(path, device, record):
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file as load_safetensors

        record["how"] = "safetensors"
        return load_safetensors(path, device="cpu")
    try:
        obj = torch.load(path, weights_only=True)
        record["how"] = "weights_only"
        return obj
    except Exception as exc:
        record["plain_error"] = first_line(exc)
    obj = torch.load(path, weights_only=True, map_location=device)
    record["how"] = "map_location"
    return obj


def load_folder(path, record):
    import transformers

    config = transformers.AutoConfig.from_pretrained(path)
    names = list(getattr(config, "architectures", None) or [])
    cls = next((getattr(transformers, n) for n in names if hasattr(transformers, n)), transformers.AutoModel)
    model = cls.from_pretrained(path)
    record["how"] = "from_pretrained"
    record["class"] = cls.__name__
    return model


def main(spec_path, out_path):
    spec = json.loads(open(spec_path).read())
    results = []
    for item in spec["checkpoints"]:
        record = {"path": item["path"], "kind": item["kind"], "how": None, "plain_error": None, "error": None,
                  "digests": []}
        results.append(record)
        try:
            obj = load_folder(item["path"], record) if item["kind"] == "folder" else \
                load_file(item["path"], spec["device"], record)
            record["digests"] = [digest(t) for t in tensors_of(obj, [])]
        except ModuleNotFoundError as exc:
            record["error"] = first_line(exc)
            record["needs_package"] = exc.name
        except Exception as exc:
            record["error"] = first_line(exc)
            record["traceback"] = traceback.format_exc()
            # the safe unpickler refused a Python class: the file loads only with weights_only=False (trusted files)
            record["unsafe_only"] = "Unsupported global" in str(exc)
    summary = {"checkpoints": results,
               "torchferry_absent": not any(m.split(".")[0] == "torchferry" for m in sys.modules)}
    with open(out_path, "w") as f:
        json.dump(summary, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
