"""Harness format ``rsi-harness/1`` (docs/formats.md §5, §6.3): manifests, versions, payloads, H0, tagging,
diffs.

A harness is a manifest of typed components plus the text files they reference; its version is the
SHA-256 of its content. Modules: ``manifest`` (model + validation), ``paths`` (path safety),
``addresses`` (edit addresses, locks), ``version`` (canonical JSON, version id), ``payload``
(:class:`Harness`, materialisation), ``storage`` (directories), ``checkpoint`` (export files),
``bundled`` (H0, resolution), ``tagging``, ``diff``. The package is a format: it names component
classes by impl string and never imports them; which classes exist, and building them, is the
kernel's component registry (``rsi_common.kernel.components``).
The bundled harnesses live in the data directory ``builtin/<name>/`` (hence no ``builtin.py``
module, which would shadow it for type checkers).
"""

from __future__ import annotations

from rsi_common.harness.addresses import (
    PLATFORM_FIELDS,
    Address,
    addresses_for,
    editable_addresses,
    param_leaves,
    parse_address,
    with_param,
)
from rsi_common.harness.bundled import BUILTIN_ROOT, H0_VERSION, builtin_dir, h0, resolve_harness
from rsi_common.harness.checkpoint import Checkpoint, checkpoint_filename, checkpoint_json, load_checkpoint
from rsi_common.harness.diff import diff_trees, harness_from_workspace, workspace_of
from rsi_common.harness.manifest import IMPL_PREFIX, SCHEMA, ComponentSpec, Manifest, is_locked, load_manifest
from rsi_common.harness.paths import MANIFEST_FILE, check_path
from rsi_common.harness.payload import Harness, build_harness, materialize
from rsi_common.harness.storage import dir_name, export_dir, load_dir
from rsi_common.harness.tagging import Touch, TouchSet, covers, normalize_edits, touched
from rsi_common.harness.version import canonical_json, version_id

__all__ = [
    "BUILTIN_ROOT",
    "H0_VERSION",
    "IMPL_PREFIX",
    "MANIFEST_FILE",
    "PLATFORM_FIELDS",
    "SCHEMA",
    "Address",
    "Checkpoint",
    "ComponentSpec",
    "Harness",
    "Manifest",
    "Touch",
    "TouchSet",
    "addresses_for",
    "build_harness",
    "builtin_dir",
    "canonical_json",
    "check_path",
    "checkpoint_filename",
    "checkpoint_json",
    "covers",
    "diff_trees",
    "dir_name",
    "editable_addresses",
    "export_dir",
    "h0",
    "harness_from_workspace",
    "is_locked",
    "load_checkpoint",
    "load_dir",
    "load_manifest",
    "materialize",
    "normalize_edits",
    "param_leaves",
    "parse_address",
    "resolve_harness",
    "touched",
    "version_id",
    "with_param",
    "workspace_of",
]
