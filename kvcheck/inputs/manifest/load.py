"""Read a manifest file into validated RoleTargets, reporting every problem with file:line:column."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from kvcheck.engines import get_engine
from kvcheck.engines.flags import Catalogue, Flag, FlagError, merge_dotted
from kvcheck.errors import InputError, InputIssue, ManifestError
from kvcheck.inputs.manifest.model import (
    DEVICES,
    UNION_TAGS,
    EngineSpec,
    EstimateSpec,
    GpuSpec,
    Manifest,
    RoleSpec,
    device_name,
)
from kvcheck.io.jsontext import MAX_JSON_DEPTH
from kvcheck.io.textfile import describe, read_text_file
from kvcheck.io.yamlpos import Positions, dotted, load_yaml_with_positions
from kvcheck.model import EstimateInputs, Finding, Location, RoleTarget
from kvcheck.policy.config import PolicyConfig

MAX_MANIFEST_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class LoadedManifest:
    """A validated manifest with the roles ready for a backend."""

    path: Path
    display_path: str
    manifest: Manifest
    targets: tuple[RoleTarget, ...]
    policy: PolicyConfig
    catalogue_note: str | None  # set when another release's flag catalogue stood in

    def notes(self) -> list[Finding]:
        """Deployment-level findings about the manifest itself (KV204 when a catalogue stood in)."""
        from kvcheck.policy.registry import finding

        if not self.catalogue_note:
            return []
        return [
            finding(
                "KV204",
                None,
                self.catalogue_note,
                hint="upgrade kvcheck or generate the release's catalogue (docs/flag-catalogues.md)",
            )
        ]


def _model_fields(model: type[BaseModel], path: tuple[str | int, ...]) -> list[str]:
    """The field names allowed at `path` inside `model`, for "did you mean" suggestions."""
    current: Any = model
    for part in path:
        if isinstance(part, int) or current is None:
            continue
        fields = getattr(current, "model_fields", None)
        if fields is None:
            return []
        if part not in fields:
            return []
        current = _unwrap_model(fields[part].annotation)
    fields = getattr(current, "model_fields", None)
    return list(fields) if fields else []


def _unwrap_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _unwrap_model(arg)
        if found is not None:
            return found
    return None


def _allowed_keys(path: tuple[str | int, ...], root: type[BaseModel] = Manifest) -> list[str]:
    from kvcheck.inputs.manifest.model import RoleSpec

    if root is Manifest and len(path) >= 2 and path[0] == "roles":
        return _model_fields(RoleSpec, tuple(path[2:]))
    return _model_fields(root, path)


def _pydantic_issues(
    exc: ValidationError, file: str, positions: Positions, root: type[BaseModel] = Manifest,
) -> list[InputIssue]:
    """Issues at their file:line; `root`: the model validated (a manifest, or an overlay, whose keys differ)."""
    issues = []
    for error in exc.errors():
        loc = tuple(part for part in error["loc"] if part not in UNION_TAGS)
        kind = error["type"]
        if kind == "extra_forbidden":
            key = str(loc[-1])
            allowed = _allowed_keys(loc[:-1], root)
            close = [c for c in suggest(key, allowed) if c != key]
            message = f"unknown key '{key}'"
            if root is not Manifest and key in _allowed_keys(loc[:-1]):
                message = (f"'{key}' is a manifest key an overlay does not take: the deployment files state it"
                           + (f" (an overlay takes here: {', '.join(allowed)})" if allowed else ""))
            elif close:
                message += f" (did you mean '{close[0]}'?)"
            elif allowed:
                message += f" (allowed here: {', '.join(allowed)})"
            where = positions.of_key(loc)
        elif kind == "missing":
            message = f"missing required key '{loc[-1]}'"
            where = positions.of_value(loc[:-1])
        else:
            message = error["msg"].removeprefix("Value error, ")
            if "input" in error and kind not in ("model_type", "dict_type") and not isinstance(
                error["input"], dict | list
            ):
                message += f" (got {error['input']!r})"
            where = positions.of_value(loc)
        line, column = where if where else (None, None)
        issues.append(InputIssue(file, line, column, dotted(loc), message))
    return issues


def suggest(key: str, allowed: list[str]) -> list[str]:
    """The likely intended key: a close spelling, or a key that the typed one starts or ends with."""
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    if close:
        return close
    norm = key.lower().replace("-", "_")
    return [a for a in allowed if norm.startswith(a) or norm.endswith(a) or a.startswith(norm)][:1]


def _merge_estimate(*specs: EstimateSpec | None) -> EstimateInputs:
    values: dict[str, Any] = {}
    for spec in specs:
        if spec is not None:
            values.update({k: v for k, v in spec.model_dump().items() if v is not None})
    return EstimateInputs(**values)


_ArgEntries = dict[str, tuple[Any, Any, tuple[str | int, ...]]]  # field -> (flag, typed value, key path)


@dataclass(frozen=True)
class _Dotted:
    """A dotted args key (`compilation-config.cudagraph_capture_sizes: [1, 2, 4]`): one key inside its flag's JSON
    value, folded into that value once the role's args are merged (_fold_dotted)."""

    keys: tuple[str, ...]
    value: Any


def _validate_args(
    args: Mapping[str, Any],
    base: tuple[str | int, ...],
    catalogue: Catalogue,
    file: str,
    positions: Positions,
    issues: list[InputIssue],
) -> dict[str, tuple[Any, Any, tuple[str | int, ...]]]:
    """Field name (`field.key...` for a dotted key) -> (flag, typed value or _Dotted, path of the key); bad
    entries become issues."""
    out: dict[str, tuple[Any, Any, tuple[str | int, ...]]] = {}
    for key, value in args.items():
        path = (*base, key)
        if "." in str(key):
            entry = _dotted_entry(str(key), value, path, catalogue, file, positions, issues)
            if entry is None:
                continue
            name, flag, typed = entry
        else:
            try:
                flag = catalogue.resolve(key)
            except FlagError as exc:
                where = positions.of_key(path)
                issues.append(InputIssue.at(file, where, dotted(path), str(exc)))
                continue
            try:
                typed = catalogue.coerce(flag, value)
            except FlagError as exc:
                where = positions.of_value(path)
                issues.append(InputIssue.at(file, where, dotted(path), str(exc)))
                continue
            name = flag.key
        if name in out and out[name][2][:-1] == base:
            where = positions.of_key(path)
            other = dotted(out[name][2])
            issues.append(
                InputIssue.at(file, where, dotted(path), f"sets the same flag as {other}")
            )
            continue
        out[name] = (flag, typed, path)
    return out


def _dotted_entry(
    key: str, value: Any, path: tuple[str | int, ...], catalogue: Catalogue, file: str, positions: Positions,
    issues: list[InputIssue],
) -> tuple[str, Flag, _Dotted] | None:
    """A dotted key, where the engine's command line takes it (`--FLAG.KEY VALUE`: vLLM's JSON flags, from 0.9.0;
    SGLang none): (its field name, the flag, the key and value); None after an issue at the key."""
    spelled = key.strip().lstrip("-")
    head, *keys = spelled.split(".")
    where = positions.of_key(path)

    def refuse(message: str) -> None:
        issues.append(InputIssue.at(file, where, dotted(path), message))

    if spelled.endswith("+"):
        refuse(f"'{spelled}': a trailing '+' appends comma-separated text on {catalogue.label}'s command line; in a "
               "manifest write the list itself as the key's value")
        return None
    if not head or not keys or not all(keys):
        refuse(f"'{spelled}': a dotted key needs a flag before the first '.' and a name after each '.'")
        return None
    if len(keys) >= MAX_JSON_DEPTH:
        refuse(f"'{spelled[:80]}...': {len(keys)} nested keys; kvcheck reads at most {MAX_JSON_DEPTH - 1}")
        return None
    try:
        flag = catalogue.resolve(head)
    except FlagError as exc:
        refuse(_unknown_head(catalogue, head, keys, exc))
        return None
    if not catalogue.dotted_keys(flag):
        refuse(f"'{spelled}': {catalogue.no_dotted_keys(flag)}")
        return None
    if flag.config_keys is not None and keys[0] not in flag.config_keys[1]:
        # the config class takes only its own fields: said at this key's line; the values are judged once merged
        config, known = flag.config_keys
        close = difflib.get_close_matches(keys[0], known, n=1, cutoff=0.6)
        hint = f" (did you mean '{'.'.join((head, close[0], *keys[1:]))}'?)" if close else ""
        refuse(f"'{spelled}': unknown key '{keys[0]}' for {catalogue.label} {catalogue.version}'s {config}{hint}; "
               "its parser exits 2 on it")
        return None
    return ".".join((flag.key, *keys)), flag, _Dotted(tuple(keys), value)


def _unknown_head(catalogue: Catalogue, head: str, keys: list[str], exc: FlagError) -> str:
    """The refusal of a dotted key whose flag is unknown, suggesting the whole key meant (the nearest flag that
    takes dotted keys, else the nearest flag)."""
    text = str(exc)
    if not text.startswith("unknown "):
        return text  # removed, ambiguous or reserved: the catalogue's own words
    takes = [flag.name[2:] for flag in catalogue.flags if catalogue.dotted_keys(flag)]
    norm = head.replace("_", "-")
    close = difflib.get_close_matches(norm, takes, n=1, cutoff=0.6)
    rest = ".".join(keys)
    if close:
        return (f"unknown {catalogue.label} flag '{norm}' in '{head}.{rest}' ({catalogue.label} {catalogue.version}) "
                f"(did you mean '{close[0]}.{rest}'?)")
    return text.replace("(did you mean '", "(did you mean a whole value of '", 1)


def _fold_dotted(
    entries: _ArgEntries, catalogue: Catalogue, file: str, positions: Positions, issues: list[InputIssue]
) -> tuple[_ArgEntries, bool]:
    """A role's merged args with its dotted keys folded into their flag's value, as vLLM's FlexibleArgumentParser
    merges them (recursive_dict_update: shared keys first, then the role's), then judged as that value given
    whole; False when one was refused. vLLM's parser puts the merge after every other argument, so it replaces a
    value the same flag is given whole: args that set both are refused, rather than one silently dropped."""
    out: _ArgEntries = {}
    folded: dict[str, list[tuple[Flag, _Dotted, tuple[str | int, ...]]]] = {}
    for key, (flag, value, path) in entries.items():
        if isinstance(value, _Dotted):
            folded.setdefault(flag.key, []).append((flag, value, path))
        else:
            out[key] = (flag, value, path)
    ok = True
    for name, items in folded.items():
        flag, first = items[0][0], items[0][2]
        issue: InputIssue | None = None
        if name in out:
            issue = InputIssue.at(
                file, positions.of_key(first), dotted(first),
                f"sets a key inside {flag.name[2:]}, which {dotted(out[name][2])} gives whole: {catalogue.label} "
                "replaces a whole value with the merge of its dotted keys, so one of them would be dropped; write "
                f"{flag.name[2:]} one way (whole, or every key dotted)")
        else:
            merged: dict[str, Any] = {}
            for _, item, _ in items:
                merge_dotted(merged, item.keys, item.value)
            try:
                out[name] = (flag, catalogue.coerce(flag, merged), first)
            except FlagError as exc:
                issue = InputIssue.at(file, positions.of_key(first), dotted(first),
                                      f"{flag.name[2:]} as its dotted keys merge: {exc}")
        if issue is not None:
            ok = False
            if issue not in issues:  # shared keys are folded once per role
                issues.append(issue)
    return out, ok


def _relative_to_manifest(value: str, folder: Path) -> str:
    """A path written relative to the manifest (`./weights`, `../bin/serve`) made absolute.

    Hugging Face repo ids (`org/name`) and absolute paths are left as written; a relative path is
    only rewritten when it is spelled as one (./, ../) or exists beside the manifest.
    """
    if value.startswith(("/", "~")) or "://" in value:
        return value
    candidate = folder / value
    if value.startswith(("./", "../")) or _exists(candidate):
        return str(candidate.resolve())
    return value


def _exists(path: Path) -> bool:
    """Whether a path names something; a name the file system cannot hold (too long, a NUL) names nothing."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def _engine_gpus(data: dict[str, Any], args: Mapping[str, Any]) -> int | None:
    """The GPUs the manifest's engine says these args need (Engine.gpus_needed), None when it leaves it to
    _parallel_gpus or the manifest names no engine kvcheck knows (reported elsewhere)."""
    engine = data.get("engine")
    name = engine.get("name") if isinstance(engine, dict) else None
    try:
        return get_engine(str(name or EngineSpec.model_fields["name"].default)).gpus_needed(args)
    except (InputError, KeyError, ValueError):
        return None


def _check_nodes(data: dict[str, Any], name: str, merged: _ArgEntries, display: str, positions: Positions,
                 issues: list[InputIssue]) -> None:
    """`roles.N.nodes` is for an engine whose instance spans its group's pods without a flag (vLLM over Ray);
    an engine's own node count (--nnodes) is stated in args, once."""
    engine_name = _declared_engine(data, None)
    if engine_name is None:
        return  # an unknown engine is reported elsewhere
    found = get_engine(engine_name)
    where = positions.of_value(("roles", name, "nodes"))
    if not found.nodes_from_group:
        issues.append(InputIssue.at(
            display, where, f"roles.{name}.nodes",
            f"{found.label} spans nodes with its own flag: state args.nnodes instead of nodes"))
    elif "nnodes" in merged:
        issues.append(InputIssue.at(
            display, where, f"roles.{name}.nodes",
            f"both nodes and args.nnodes state the role's node count: keep args.nnodes for {found.label}'s "
            "multiprocessing launch, or nodes for a Ray cluster its pods form, not both"))


def _on_gpu(data: dict[str, Any], role: dict[str, Any]) -> bool:
    return str(role.get("device") or data.get("device") or "gpu").lower() != "cpu"


def _check_visible_devices(path: tuple[str, ...], env: Any, name: str, display: str, positions: Positions,
                           issues: list[InputIssue]) -> None:
    """A CUDA_VISIBLE_DEVICES in the manifest's env would win over the GPUs kvcheck gives a GPU role
    (roles.N.gpus, which the pre-flight inspects), so the engine would run on other devices than the ones
    checked: the manifest names the GPUs once, in gpus."""
    if not isinstance(env, dict) or "CUDA_VISIBLE_DEVICES" not in env:
        return
    issues.append(InputIssue.at(
        display, positions.of_value((*path, "CUDA_VISIBLE_DEVICES")), ".".join((*path, "CUDA_VISIBLE_DEVICES")),
        f"CUDA_VISIBLE_DEVICES={str(env['CUDA_VISIBLE_DEVICES'])!r} would override the GPUs kvcheck gives "
        f"role {name} (roles.{name}.gpus, the ones its pre-flight inspects): list the GPUs in "
        f"roles.{name}.gpus instead"))


def _parallel_gpus(args: Mapping[str, Any]) -> int:
    """GPUs a role's parallel settings need: TP x PP, times DP replicas outside attention DP."""
    tp = int(args.get("tp_size") or 1)
    pp = int(args.get("pp_size") or 1)
    dp = int(args.get("dp_size") or 1)
    attention_dp = bool(args.get("enable_dp_attention")) or int(args.get("attn_dp_size") or 1) > 1
    return tp * pp * (1 if attention_dp else dp)


# Characters people type for digits in codes like KV101: letter O for zero, I or l for one.
_DIGIT_LOOKALIKES = str.maketrans({"O": "0", "o": "0", "I": "1", "l": "1", "i": "1"})


def _likely_rule_code(code: str, known: list[str]) -> str | None:
    """The rule a typo meant: the code with look-alike letters read as digits, else the closest spelling.

    Read look-alikes first so the suggestion for `KV1O1` stays KV101 however many rules are added.
    """
    normal = code.upper()[:2] + code[2:].translate(_DIGIT_LOOKALIKES) if len(code) > 2 else code.upper()
    if normal in known:
        return normal
    close = difflib.get_close_matches(normal, known, n=1, cutoff=0.6)
    return close[0] if close else None


def _check_rule_codes(policy: Any, file: str, positions: Positions) -> list[InputIssue]:
    """policy.ignore and policy.severity must name rules that exist (a typo would silence nothing)."""
    from kvcheck.policy.registry import all_rules

    if not isinstance(policy, dict):
        return []
    known = all_rules()
    found = []
    ignore = policy.get("ignore")
    raw_severity = policy.get("severity")
    severity: dict[Any, Any] = raw_severity if isinstance(raw_severity, dict) else {}
    entries: list[tuple[tuple[str | int, ...], Any, bool]] = []
    if isinstance(ignore, list):
        entries += [(("policy", "ignore", i), code, False) for i, code in enumerate(ignore)]
    entries += [(("policy", "severity", code), code, True) for code in severity]
    for sub, code, is_key in entries:
        if not isinstance(code, str):
            continue
        where = positions.of_key(sub) if is_key else positions.of_value(sub)
        if code not in known:
            close = _likely_rule_code(code, list(known))
            message = f"unknown rule code '{code}'" + (f" (did you mean '{close}'?)" if close else "")
            found.append(InputIssue.at(file, where, dotted(sub), message))
            continue
        rule = known[code]
        lowered = not is_key or severity.get(code) != "error"
        if rule.code.startswith("KV3") and rule.severity == "error" and lowered:
            found.append(
                InputIssue.at(
                    file,
                    where,
                    dotted(sub),
                    f"{code} cannot be ignored or downgraded: it means a role could not be checked, "
                    "and a role that was not checked must never pass",
                )
            )
    return found


def _resolve_gpu(
    value: str | GpuSpec | None, where_path: tuple[str, ...], file: str, positions: Positions, issues: list[InputIssue]
) -> str | None:
    """The GPU name a role's target carries: an ambiguous name is an issue listing the choices;
    a mapping becomes a profile of its own (profiles/gpus/ is not edited)."""
    from kvcheck import gpus

    if value is None:
        return None
    if isinstance(value, GpuSpec):
        try:
            gpus.register_custom(
                gpus.custom_profile(
                    value.name, value.memory_mib, vendor=value.vendor, compute_capability=value.compute_capability,
                    pre_baseline_mib=value.pre_baseline_mib, description=value.description,
                )
            )
        except InputError as exc:
            where = positions.of_value((*where_path, "compute_capability"))
            issues.append(InputIssue.at(file, where, dotted(where_path), exc.message))
        return value.name
    try:
        found = gpus.default_profiles().matches(value)
    except InputError as exc:  # a broken profile in a --profiles folder
        issues.append(InputIssue(file, None, None, "", exc.message))
        return value
    message = None
    if len(found) > 1:
        message = gpus.ambiguous(value, found).message
    elif not found:  # a typo is invalid input, like an unknown key (a new card: a gpu: mapping or --profiles)
        close = gpus.default_profiles().suggest(value)
        message = (f"unknown GPU {value!r}" + (f" (did you mean {close!r}?)" if close else "")
                   + "; describe a card without a profile with a gpu: mapping (name, memory_mib), or add a "
                   "profile with --profiles DIR")
    if message is not None:
        where = positions.of_value(where_path)
        issue = InputIssue.at(file, where, dotted(where_path), message)
        if issue not in issues:  # a top-level gpu: shared by several roles is reported once
            issues.append(issue)
    return value




def load_manifest(path: str | Path, *, display: str | None = None, text: str | None = None) -> LoadedManifest:
    """Load, validate and expand a manifest; raises ManifestError with every issue found.

    `text`: the file's text when the caller has read it already (it is not read again).
    """
    path = Path(path)
    display = display or str(path)
    if text is None:
        text = read_text_file(path, display, kind="manifest file", max_bytes=MAX_MANIFEST_BYTES)
    data, positions, issues = load_yaml_with_positions(text, display)
    if data is None:
        raise InputError(f"{display}: the manifest is empty")
    if not isinstance(data, dict):
        raise InputError(f"{display}:1:1: the manifest must be a YAML mapping, not {type(data).__name__}")

    manifest: Manifest | None = None
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        issues.extend(_pydantic_issues(exc, display, positions))

    # Engine arguments are checked against the declared release even when other keys are wrong,
    # so one run reports every problem.
    catalogue, catalogue_note = _declared_catalogue(data, manifest, display, positions, issues)
    targets: list[RoleTarget] = []
    if catalogue is not None:
        merged, args_broken = _validate_all_args(data, catalogue, display, positions, issues)
        cpu_roles = _check_devices(data, manifest, merged, display, positions, issues)
        _check_gpu_counts(data, merged, args_broken | cpu_roles, display, positions, issues)
        if manifest is not None:
            targets = [
                _role_target(manifest, name, role, merged.get(name, {}), catalogue,
                             path, display, positions, issues)
                for name, role in manifest.roles.items()
            ]

    issues.extend(_check_rule_codes(data.get("policy"), display, positions))

    if issues:
        issues.sort(key=lambda i: (i.line or 0, i.column or 0))
        raise ManifestError(issues, hint="`kvcheck schema` prints every key the manifest accepts")
    assert manifest is not None
    policy = PolicyConfig(
        min_headroom=manifest.policy.min_headroom,
        min_concurrency=manifest.policy.min_concurrency,
        ignore=frozenset(manifest.policy.ignore),
        severity=dict(manifest.policy.severity),
    )
    return LoadedManifest(
        path=path,
        display_path=display,
        manifest=manifest,
        targets=tuple(targets),
        policy=policy,
        catalogue_note=catalogue_note,
    )


def _declared_engine(data: dict[str, Any], manifest: Manifest | None) -> str | None:
    """The engine the manifest names, also when another key failed validation (manifest None): the raw
    `engine.name` when it is a known engine, the default when the key is left out, None when it names no
    engine kvcheck knows (pydantic reports that; judging the args by another engine's flags would only
    add that engine's errors)."""
    from kvcheck.engines import engine_names

    if manifest is not None:
        return manifest.engine.name
    default = str(EngineSpec.model_fields["name"].default)
    engine = data.get("engine")
    if not isinstance(engine, dict) or "name" not in engine:
        return default
    name = engine["name"]
    return name if isinstance(name, str) and name in engine_names() else None


def _declared_catalogue(
    data: dict[str, Any], manifest: Manifest | None, display: str, positions: Positions, issues: list[InputIssue]
) -> tuple[Catalogue | None, str | None]:
    """The flag catalogue of the release the manifest declares (and the note when another stood in)."""
    version = data.get("engine", {}).get("version") if isinstance(data.get("engine"), dict) else None
    engine_name = _declared_engine(data, manifest)
    if not isinstance(version, str) or engine_name is None:
        return None, None
    try:
        catalogue: Catalogue
        catalogue, note = get_engine(engine_name).catalogue(version)
    except InputError as exc:
        where = positions.of_value(("engine", "version"))
        issues.append(InputIssue.at(display, where, "engine.version", exc.message))
        return None, None
    return catalogue, note


def _validate_all_args(
    data: dict[str, Any], catalogue: Catalogue, display: str, positions: Positions, issues: list[InputIssue]
) -> tuple[dict[str, _ArgEntries], set[str]]:
    """Each role's args (the shared ones, then its own, which override them key by key), typed and with dotted
    keys folded into their flag's value; also the roles whose merged args had an invalid entry."""
    shared: _ArgEntries = {}
    merged: dict[str, _ArgEntries] = {}
    args_broken: set[str] = set()
    before = len(issues)
    if isinstance(data.get("args"), dict):
        shared = _validate_args(data["args"], ("args",), catalogue, display, positions, issues)
    shared_broken = len(issues) > before
    for name, role in (data.get("roles") or {}).items() if isinstance(data.get("roles"), dict) else ():
        before = len(issues)
        own: _ArgEntries = {}
        if isinstance(role, dict) and isinstance(role.get("args"), dict):
            own = _validate_args(role["args"], ("roles", name, "args"), catalogue, display, positions, issues)
        merged[name], folded = _fold_dotted({**shared, **own}, catalogue, display, positions, issues)
        if shared_broken or len(issues) > before or not folded:
            args_broken.add(name)
    return merged, args_broken


def _check_devices(
    data: dict[str, Any],
    manifest: Manifest | None,
    merged: dict[str, _ArgEntries],
    display: str,
    positions: Positions,
    issues: list[InputIssue],
) -> set[str]:
    """The roles on the CPU; a CPU role that lists GPUs, or a `device` its args contradict, is an issue.

    `device: cpu` (top level or per role) makes a CPU role; so does an engine argument that selects the
    CPU (SGLang `--device cpu`) without a `device` key. A `device` key and the args disagreeing on
    whether the role runs on the CPU is refused: one of them is a mistake, and guessing which would
    measure the wrong deployment.
    """
    roles = data.get("roles")
    if not isinstance(roles, dict):
        return set()
    engine = get_engine(_declared_engine(data, manifest) or str(EngineSpec.model_fields["name"].default))
    top = data.get("device") if data.get("device") in DEVICES else None  # another value: pydantic's issue
    cpu_roles: set[str] = set()
    for name, role in roles.items():
        role = role if isinstance(role, dict) else {}
        own = role.get("device") if role.get("device") in DEVICES else None
        declared = device_name(own or top)
        args = {key: value for key, (_, value, _) in merged.get(name, {}).items()}
        from_args = engine.args_device(args)
        if declared is not None and from_args is not None and (declared == "cpu") != (from_args == "cpu"):
            key_path = ("roles", name, "device") if own else ("device",)
            issues.append(InputIssue.at(
                display, positions.of_value(key_path), dotted(key_path),
                f"device {own or top} for role {name}, but its args select --device {from_args}: say the "
                f"device once, in the manifest's `device` ({engine.label} is then started on it)",
            ))
        on_cpu = (declared or from_args) == "cpu"
        if on_cpu:
            cpu_roles.add(name)
            if role.get("gpus"):
                issues.append(InputIssue.at(
                    display, positions.of_value(("roles", name, "gpus")), f"roles.{name}.gpus",
                    "the role runs on the CPU (device: cpu): it takes no GPU list; remove gpus",
                ))
    return cpu_roles


def _check_gpu_counts(
    data: dict[str, Any],
    merged: dict[str, _ArgEntries],
    args_broken: set[str],
    display: str,
    positions: Positions,
    issues: list[InputIssue],
) -> None:
    """Each role's GPU list x nnodes must be what its parallel settings use."""
    if not isinstance(data.get("roles"), dict):
        return
    engine = data.get("engine")
    gpu_roles = [name for name, role in data["roles"].items() if isinstance(role, dict) and _on_gpu(data, role)]
    if gpu_roles and isinstance(engine, dict):
        _check_visible_devices(("engine", "env"), engine.get("env"), gpu_roles[0], display, positions, issues)
    for name, role in data["roles"].items():
        if isinstance(role, dict) and role.get("nodes") is not None:
            _check_nodes(data, name, merged.get(name, {}), display, positions, issues)
        if isinstance(role, dict) and _on_gpu(data, role):
            _check_visible_devices(("roles", name, "env"), role.get("env"), name, display, positions, issues)
        gpus = role.get("gpus") if isinstance(role, dict) else None
        if not isinstance(gpus, list) or not gpus or name in args_broken:
            continue  # without valid parallel settings the GPU count cannot be judged
        args = {key: value for key, (_, value, _) in merged.get(name, {}).items()}
        nodes = role.get("nodes")
        if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
            nodes = None  # another value: pydantic's issue
        nnodes = int(args.get("nnodes") or nodes or 1)
        needed = _engine_gpus(data, args)  # the engine's own count (vLLM's tensor/pipeline/data parallel sizes)
        need = _parallel_gpus(args) if needed is None else needed
        if len(gpus) * nnodes != need:
            where = positions.of_value(("roles", name, "gpus"))
            if needed is None:
                how = "tp-size x pp-size x data-parallel replicas"
            else:  # the engine's own flags, as the role sets them (vLLM: tensor-parallel-size 2)
                sizes = [f"{key.replace('_', '-')} {value}" for key, value in args.items()
                         if key.endswith(("parallel_size", "parallel_size_local"))]
                how = "the product of its parallel sizes: " + (", ".join(sizes) or "all 1")
            issues.append(
                InputIssue.at(
                    display,
                    where,
                    f"roles.{name}.gpus",
                    f"{len(gpus)} GPU(s) x {nnodes} node(s) = {len(gpus) * nnodes}, but the role's "
                    f"parallel settings need {need} ({how})",
                )
            )


def _role_target(
    manifest: Manifest,
    name: str,
    role: RoleSpec,
    merged: _ArgEntries,
    catalogue: Catalogue,
    path: Path,
    display: str,
    positions: Positions,
    issues: list[InputIssue],
) -> RoleTarget:
    """One role's target: its merged args and argv, where each was written, and its files."""
    args = {key: value for key, (_, value, _) in merged.items()}
    argv: list[str] = []
    for _key, (flag, value, _) in merged.items():
        argv.extend(catalogue.argv(flag, value))
    arg_locations = {}
    for key, (_, _, arg_path) in merged.items():
        where = positions.of_key(arg_path)
        arg_locations[key] = Location(display, *(where or (None, None)))
    role_where = positions.of_key(("roles", name))
    role_location = Location(display, *(role_where or (None, None)))

    first_role = name == next(iter(manifest.roles))  # model files are reported once, not per role
    config_path = _model_file(manifest.model.config, "config", path, display, positions, issues, first_role)
    draft_path = _model_file(manifest.model.draft_config, "draft_config", path, display, positions, issues, first_role)
    model_path = _relative_to_manifest(manifest.model.path, path.parent)
    command = list(manifest.engine.command or get_engine(manifest.engine.name).default_command)
    if "/" in command[0]:
        command[0] = _relative_to_manifest(command[0], path.parent)
    return RoleTarget(
        name=name,
        context_length=manifest.context_length,
        min_headroom=manifest.policy.min_headroom,
        engine_version=manifest.engine.version,
        args=args,
        argv_args=tuple(argv),
        gpus=tuple(role.gpus),
        gpu=_resolve_gpu(
            role.gpu or manifest.gpu,
            ("roles", name, "gpu") if role.gpu else ("gpu",),
            display, positions, issues,
        ),
        model_path=model_path,
        model_config=config_path,
        draft_config=draft_path,
        engine_command=tuple(command),
        engine=manifest.engine.name,
        device=device_name(role.device or manifest.device),
        nodes=role.nodes or 1,
        env={**manifest.engine.env, **role.env},
        estimate=_merge_estimate(manifest.estimate, role.estimate),
        location=role_location,
        arg_locations=arg_locations,
        side=_side(manifest.engine.name, name, role, args, display, positions, issues),
    )


def _side(
    engine_name: str, name: str, role: RoleSpec, args: Mapping[str, Any], display: str, positions: Positions,
    issues: list[InputIssue],
) -> str | None:
    """roles.N.side, checked against what the engine's arguments say of the role's side."""
    if role.side is None:
        return None
    engine = get_engine(engine_name)
    stated = engine.role_mode(args)
    where = positions.of_value(("roles", name, "side"))
    if stated in ("prefill", "decode") and stated != role.side:
        issues.append(InputIssue.at(display, where, f"roles.{name}.side",
                                    f"'{role.side}', but the role's {engine.label} arguments make it a {stated} role"))
    elif stated is None and engine.side_flag is not None:
        issues.append(InputIssue.at(display, where, f"roles.{name}.side",
                                    f"{engine.label} states a role's side with {engine.side_flag}; set "
                                    f"{engine.side_flag.lstrip('-')}: {role.side} in the role's args instead"))
    return role.side


def _model_file(
    value: str | None,
    key: str,
    path: Path,
    display: str,
    positions: Positions,
    issues: list[InputIssue],
    report: bool,
) -> Path | None:
    """model.<key> resolved against the manifest's folder; a missing file is an issue when `report`."""
    file = (path.parent / value).resolve() if value else None
    what = describe(file) if file is not None and report else None
    if file is not None and what is not None:
        where = positions.of_value(("model", key))
        message = (f"no such file: {file} (model.{key} is relative to the manifest's folder)" if what == "no such file"
                   else f"{file} is {what}, not a file (model.{key} names the model's {key} file)")
        issues.append(InputIssue.at(display, where, f"model.{key}", message))
    return file
