"""The registered component implementations (docs/formats.md §5.5, §5.6) and their registry.

:mod:`~rsi_common.kernel.components.registry` holds the one list of classes a harness may name and
derives the rest from it (impl strings, kinds, hook methods); :func:`instantiate` builds a turn's
components from a harness through it. Harnesses can only name these classes (no dynamic import of
arbitrary modules).
"""

from __future__ import annotations

from rsi_common.kernel.components.base import Component
from rsi_common.kernel.components.config import PromptCacheComponent
from rsi_common.kernel.components.context import StandardContextComponent
from rsi_common.kernel.components.control import StandardControlComponent
from rsi_common.kernel.components.memory import ArchiveMemoryComponent
from rsi_common.kernel.components.output import ParseOutputComponent
from rsi_common.kernel.components.prompt import SystemPromptComponent
from rsi_common.kernel.components.registry import (
    KNOWN_IMPLS,
    PROTOCOL_METHODS,
    REGISTERED,
    REGISTRY,
    check_component,
    effective_params,
    impl_of,
    instantiate,
)
from rsi_common.kernel.components.skills import SkillLibraryComponent
from rsi_common.kernel.components.tools import ToolExposureComponent

__all__ = [
    "KNOWN_IMPLS",
    "PROTOCOL_METHODS",
    "REGISTERED",
    "REGISTRY",
    "ArchiveMemoryComponent",
    "Component",
    "ParseOutputComponent",
    "PromptCacheComponent",
    "SkillLibraryComponent",
    "StandardContextComponent",
    "StandardControlComponent",
    "SystemPromptComponent",
    "ToolExposureComponent",
    "check_component",
    "effective_params",
    "impl_of",
    "instantiate",
]
