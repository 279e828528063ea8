"""One way to name a Hugging Face model, for every command: `check`'s ``-w``, `coverage`'s
architectures and ``--configs``, `plan`'s ``-w``.

A model spec is one of (``FORMS``):

- a built-in name the command has (``llama`` for `check`: its own workload);
- a transformers model type (``mistral``): its default config;
- a ``config.json`` path, or a folder holding one (a checkpoint folder);
- a Hub id, ``org/name`` or ``org/name@revision``: only its ``config.json`` is fetched, through
  ``huggingface_hub`` as transformers fetches it (the user's cache, ``HF_HUB_CACHE`` /
  ``HF_HOME``, and token). With ``HF_HUB_OFFLINE=1`` (or ``TRANSFORMERS_OFFLINE=1``) only the
  cache is read; a miss is an error naming the id and the flag. Weights stay random unless the
  command's ``--weights`` asks for them.

A config whose ``auto_map`` points at code in its repository, for a model type this transformers
does not have, is refused unless ``--trust-remote-code`` is given, as transformers refuses it
(``resolve_trust_remote_code`` in transformers' ``dynamic_module_utils.py``). The vendor's sweep
trusts every ``auto_map`` (``auto_map_needs_trust``): its configs with one run the repository's
code even where transformers has the type.

Resolution (``resolve``) runs in the command's own process, before any worker: it reads or
fetches the config file and nothing else. Workers get ``ModelSource.to_dict()`` and load the
config from the resolved file (``load_config``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from torchferry.errors import UsageError

FORMS = ("a built-in name, a transformers model type (llama), a config.json path or a folder holding one, "
         "or a Hub id (org/name, optionally @revision)")
PYTHON_FILE = "pass a config.json (or a folder holding one), a model type or a Hub id."  # {file}: the file named
HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<revision>[\w./-]+))?$")
OFFLINE_FLAGS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
CONFIG_FILE = "config.json"
CONFIG_SUFFIX = "_config.json"  # a folder of configs named <org>_<name>_config.json (the vendor's sweep)
HUB_CACHE_PREFIX = "models--"  # huggingface_hub's cache: models--<org>--<name>/snapshots/<revision>/
# Prefixes other tools put before a Hub id (vLLM's and fsspec's hf://, the Hub's own URLs); no command reads them.
HUB_PREFIXES = ("https://huggingface.co/", "http://huggingface.co/", "huggingface.co/", "hf://", "hf:", "huggingface:")


class RemoteCodeRefused(UsageError):
    """The config runs code from its repository and ``--trust-remote-code`` was not given."""


@dataclass(frozen=True, kw_only=True)
class ModelSource:
    spec: str  # as the user gave it
    kind: str  # "builtin" | "model-type" | "config" | "hub"
    name: str  # what rows and reports call it
    model_type: str | None = None
    config_path: str | None = None  # absolute config.json ("config", and "hub" once fetched)
    hub_id: str | None = None  # org/name: the model id ("hub"; a --configs file's name when it gives one)
    revision: str | None = None
    auto_map: tuple[str, ...] = ()  # the auto classes its repository's code provides
    native: bool = True  # the model type is one this transformers implements

    def needs_remote_code(self, auto_map_needs_trust: bool = False) -> bool:
        """Whether building it runs its repository's code: a type transformers lacks, or any auto_map for the vendor."""
        return bool(self.auto_map) and (auto_map_needs_trust or not self.native)

    def refuse_untrusted(self, trust_remote_code: bool, auto_map_needs_trust: bool = False) -> None:
        """Raise ``RemoteCodeRefused`` when it needs remote code that was not trusted."""
        if self.needs_remote_code(auto_map_needs_trust) and not trust_remote_code:
            why = (f"its model type {self.model_type!r} is not in this transformers" if not self.native
                   else "the vendor's sweep runs the repository's code for every config with an auto_map")
            raise RemoteCodeRefused(
                f"{self.spec!r} needs remote code from its repository (auto_map: {', '.join(self.auto_map)}; {why}); "
                "it is refused without --trust-remote-code, as transformers refuses it. Pass --trust-remote-code if "
                "you trust that code, or name a model transformers implements.")

    def to_dict(self) -> dict:
        return {**asdict(self), "auto_map": list(self.auto_map)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelSource:
        return cls(**{**data, "auto_map": tuple(data.get("auto_map", ()))})


def offline(environ: Mapping[str, str]) -> str | None:
    """The offline flag that is set (``HF_HUB_OFFLINE=1``), or None."""
    for flag in OFFLINE_FLAGS:
        if environ.get(flag, "").strip().upper() in ("1", "ON", "YES", "TRUE"):
            return flag
    return None


def refuse_slips(spec: str, python_file: str) -> None:
    """Refuse, before anything is read, the likeliest wrong forms of a model name, each with its fix: a Hub id
    behind a prefix no command reads (``hf:org/name``, a Hub URL), and a Python file, for which ``python_file``
    says what the command does take (a command names its own way: ``-w train.py:build``, ``--plugin``)."""
    prefix = next((p for p in HUB_PREFIXES if spec.lower().startswith(p)), None)
    if prefix is not None:
        bare = "/".join(spec[len(prefix):].split("/")[:2])
        raise UsageError(f"model {spec!r}: drop the {spec[:len(prefix)]!r} prefix: a Hub id is named as org/name "
                         f"(here {bare!r}), optionally @revision; its config.json is read from your Hugging Face "
                         "cache, or fetched.")
    if spec.rpartition(":")[0].endswith(".py") or spec.endswith(".py"):
        raise UsageError(f"{spec!r} is a Python file, not a model: {python_file.format(file=spec.partition('.py')[0] + '.py')}")


def resolve(spec: str, cwd: Path, *, builtins: Iterable[str] = (), known_types: Iterable[str] | None = None,
            environ: Mapping[str, str] | None = None, python_file: str = PYTHON_FILE) -> ModelSource:
    """The model ``spec`` names, with its config file read (or fetched: a Hub id), nothing built.

    ``builtins`` are the command's own names (they win); ``known_types`` the model types it accepts
    (default: transformers' ``CONFIG_MAPPING``). Any other form is refused, listing the valid ones; a
    Python file with ``python_file``, what the command takes instead (``refuse_slips``).
    """
    environ = os.environ if environ is None else environ
    if spec in set(builtins):
        return ModelSource(spec=spec, kind="builtin", name=spec)
    refuse_slips(spec, python_file)
    types = set(known_types) if known_types is not None else _transformers_types()
    path = Path(spec).expanduser()
    path = path if path.is_absolute() else cwd / path
    if path.is_dir():
        if not (path / CONFIG_FILE).is_file():
            raise UsageError(f"model {spec!r} is a folder without a {CONFIG_FILE}. Pass a checkpoint folder, a "
                             f"config.json, or --configs FOLDER for a folder of *{CONFIG_SUFFIX} files.")
        return from_config_file(path / CONFIG_FILE, spec, name=path.resolve().name, known_types=types)
    if spec.endswith(".json") or path.is_file():
        if not path.is_file():
            raise UsageError(f"config file {spec!r} cannot be read: no such file. Pass the path of a transformers config.json.")
        return from_config_file(path, spec, known_types=types)
    if spec in types:
        return ModelSource(spec=spec, kind="model-type", name=spec, model_type=spec)
    match = HUB_ID.match(spec)
    if match:
        file = fetch_config(match["repo"], match["revision"], environ)
        source = from_config_file(file, spec, name=match["repo"], known_types=types)
        return ModelSource(**{**source.to_dict(), "kind": "hub", "hub_id": match["repo"], "revision": match["revision"],
                              "auto_map": source.auto_map})
    import difflib

    close = difflib.get_close_matches(spec, sorted(set(builtins) | types), n=3)
    raise UsageError(f"model {spec!r} is none of the forms a model can be named in: {FORMS}"
                     + (f". Did you mean {', '.join(close)}?" if close else "."))


def from_config_file(file: Path, spec: str, *, name: str | None = None, model_id: str | None = None,
                     known_types: Iterable[str] | None = None) -> ModelSource:
    """A config file as a source; its JSON is read and checked, nothing built."""
    try:
        data = json.loads(Path(file).read_text())
    except OSError as exc:
        raise UsageError(f"config {spec!r} cannot be read ({exc.strerror or exc}); pass a transformers config.json.") from exc
    except json.JSONDecodeError as exc:
        raise UsageError(f"config {spec!r} is not JSON ({exc}); pass a transformers config.json.") from exc
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise UsageError(f"config {spec!r} has no model_type; pass a transformers config.json (it names its model_type).")
    types = set(known_types) if known_types is not None else _transformers_types()
    auto_map = data.get("auto_map") if isinstance(data.get("auto_map"), dict) else {}
    if data["model_type"] not in types and not auto_map:
        raise UsageError(f"config {spec!r} has model_type {data['model_type']!r}, which this transformers does not know "
                         "and for which the config names no remote code (auto_map). Upgrade transformers, or pass a "
                         "config of a model type it has (e.g. llama, mistral, qwen2, gemma: transformers' CONFIG_MAPPING).")
    return ModelSource(spec=spec, kind="config", name=name or Path(file).stem, model_type=data["model_type"],
                       config_path=str(Path(file).resolve()), hub_id=model_id, auto_map=tuple(sorted(auto_map)),
                       native=data["model_type"] in types)


@dataclass(frozen=True)
class Folder:
    """What ``--configs DIR`` holds: one source per model found, and every JSON file passed over, with why."""

    sources: list[ModelSource]
    skipped: list[str]  # "path (why)", relative to the folder


def folder_sources(folder: Path, spec: str, known_types: Iterable[str] | None = None) -> Folder:
    """Every model of a folder (``--configs``), in three layouts, each model named once:

    - the vendor's: ``*.json`` config files at the top, each named by its file; ``<org>_<name>_config.json``
      also gives the model id ``org/name`` (the first underscore splits them, as the vendor's fetcher joins them);
    - ``save_pretrained`` / checkpoint folders: a sub-folder holding a ``config.json``, one level down, named by
      the sub-folder;
    - the Hub cache: ``models--org--name/snapshots/<revision>/config.json`` (the revision ``refs/main`` names,
      else the newest), named and identified ``org/name``.

    A JSON file that is not a model config (no ``model_type`` at its top: ``generation_config.json``,
    ``tokenizer_config.json``, an index or adapter file) is skipped and named in ``Folder.skipped``, never
    taken for one."""
    if not folder.is_dir():
        raise UsageError(f"--configs {spec!r} is not a folder. Pass a folder of config.json files or of model folders.")
    types = set(known_types) if known_types is not None else _transformers_types()
    sources: list[ModelSource] = []
    skipped: list[str] = []

    def take(file: Path, name: str, model_id: str | None) -> None:
        why = _not_a_model_config(file)
        if why:
            skipped.append(f"{file.relative_to(folder)} ({why})")
        else:
            taken = any(s.name == name for s in sources)  # gpt2/ beside gpt2.json: the second is named by its path
            sources.append(from_config_file(file, str(file), name=str(file.relative_to(folder)) if taken else name,
                                            model_id=model_id, known_types=types))

    for entry in sorted(folder.iterdir()):
        if entry.is_file() and entry.suffix == ".json":
            stem = entry.name[: -len(CONFIG_SUFFIX)] if entry.name.endswith(CONFIG_SUFFIX) else entry.stem
            org, sep, rest = stem.partition("_")
            take(entry, stem, f"{org}/{rest}" if sep and org and rest and entry.name.endswith(CONFIG_SUFFIX) else None)
        elif entry.is_dir() and entry.name.startswith(HUB_CACHE_PREFIX):
            snapshot = _hub_snapshot(entry)
            repo = entry.name[len(HUB_CACHE_PREFIX):].replace("--", "/", 1)
            if snapshot is None:
                skipped.append(f"{entry.name}/ (no snapshots/<revision>/{CONFIG_FILE})")
            else:
                take(snapshot / CONFIG_FILE, repo, repo)
        elif entry.is_dir() and (entry / CONFIG_FILE).is_file():
            take(entry / CONFIG_FILE, entry.name, None)
    if not sources:
        raise UsageError(f"--configs {spec!r} holds no model config: looked for *.json files with a model_type at its top, "
                         f"sub-folders holding a {CONFIG_FILE} (save_pretrained folders) and Hub cache folders "
                         f"(models--org--name/snapshots/<revision>/{CONFIG_FILE})"
                         + (f"; skipped {', '.join(skipped)}" if skipped else "") + ". Pass a folder of model configs.")
    return Folder(sources, skipped)


def _not_a_model_config(file: Path) -> str | None:
    """Why ``file`` is no model config (a JSON object naming its ``model_type``), or None when it is one."""
    try:
        data = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot be read: {getattr(exc, 'strerror', None) or exc}"
    except json.JSONDecodeError as exc:
        return f"not JSON: {exc}"
    return None if isinstance(data, dict) and isinstance(data.get("model_type"), str) else "no model_type: not a model config"


def _hub_snapshot(repo_folder: Path) -> Path | None:
    """The snapshot of a Hub cache folder whose config a sweep reads: ``refs/main``'s, else the newest with one."""
    main = repo_folder / "refs" / "main"
    if main.is_file():
        named = repo_folder / "snapshots" / main.read_text().strip()
        if (named / CONFIG_FILE).is_file():
            return named
    found = [p.parent for p in (repo_folder / "snapshots").glob(f"*/{CONFIG_FILE}")]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def fetch_config(repo: str, revision: str | None, environ: Mapping[str, str]) -> Path:
    """``config.json`` of a Hub repository through huggingface_hub: the cache first, the network unless offline."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    flag = offline(environ)
    cache = environ.get("HF_HUB_CACHE") or (str(Path(environ["HF_HOME"]) / "hub") if environ.get("HF_HOME") else None)
    token = environ.get("HF_TOKEN") or None
    at = f"@{revision}" if revision else ""
    try:
        return Path(hf_hub_download(repo, CONFIG_FILE, revision=revision, cache_dir=cache, token=token,
                                    local_files_only=flag is not None))
    except LocalEntryNotFoundError as exc:
        if flag:
            raise UsageError(f"model {repo}{at}: its {CONFIG_FILE} is not in the Hugging Face cache "
                             f"({cache or 'the default cache'}) and {flag}=1 forbids fetching it. Fetch it once online "
                             f"(unset {flag}), or pass a local config.json.") from exc
        raise UsageError(f"model {repo}{at}: its {CONFIG_FILE} could not be fetched (no network?) and is not in the "
                         f"cache ({cache or 'the default cache'}). Connect, or set HF_HUB_OFFLINE=1 with a cached copy, "
                         "or pass a local config.json.") from exc
    except RepositoryNotFoundError as exc:
        raise UsageError(f"model {repo}{at}: no such Hub repository, or it is gated/private and your token cannot read "
                         "it (huggingface-cli login). Check the id.") from exc
    except EntryNotFoundError as exc:
        raise UsageError(f"model {repo}{at}: the repository has no {CONFIG_FILE} (not a transformers model?).") from exc
    except HfHubHTTPError as exc:
        raise UsageError(f"model {repo}{at}: the Hub refused the {CONFIG_FILE} download ({exc}).") from exc


def load_config(source: ModelSource, *, trust_remote_code: bool = False, auto_map_needs_trust: bool = False) -> Any:
    """The transformers config of ``source`` (a model type's default, or the file as published), loaded as
    ``AutoConfig.from_pretrained`` loads it; remote code only when trusted (its repository's, for a Hub id)."""
    from transformers import AutoConfig, CONFIG_MAPPING

    source.refuse_untrusted(trust_remote_code, auto_map_needs_trust)
    if source.kind == "model-type":
        return CONFIG_MAPPING[source.model_type]()
    if source.kind == "builtin":
        raise UsageError(f"{source.spec!r} is a built-in workload, not a transformers config.")
    if trust_remote_code and source.auto_map and source.hub_id and source.kind == "hub":
        return AutoConfig.from_pretrained(source.hub_id, revision=source.revision, trust_remote_code=True)
    if source.needs_remote_code(auto_map_needs_trust):
        return AutoConfig.from_pretrained(source.config_path, trust_remote_code=True)
    data = json.loads(Path(source.config_path).read_text())
    data.pop("auto_map", None)  # the native class, as transformers picks it without trust_remote_code
    model_type = data.pop("model_type")
    return CONFIG_MAPPING[model_type].from_dict(data)


def _transformers_types() -> set[str]:
    from transformers import CONFIG_MAPPING

    return set(CONFIG_MAPPING.keys())
