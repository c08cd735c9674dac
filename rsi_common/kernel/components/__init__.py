"""The registered component implementations (SPEC §5.5, §5.6).

``REGISTRY`` maps each impl string to its class; its keys equal
:data:`rsi_common.harness.KNOWN_IMPLS`. Harnesses can only name these classes (no dynamic import
of arbitrary modules).
"""

from __future__ import annotations

from rsi_common.kernel.components.base import Component
from rsi_common.kernel.components.config import PromptCacheComponent
from rsi_common.kernel.components.context import StandardContextComponent
from rsi_common.kernel.components.control import StandardControlComponent
from rsi_common.kernel.components.memory import ArchiveMemoryComponent
from rsi_common.kernel.components.output import ParseOutputComponent
from rsi_common.kernel.components.prompt import SystemPromptComponent
from rsi_common.kernel.components.skills import SkillLibraryComponent
from rsi_common.kernel.components.tools import ToolExposureComponent

__all__ = [
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
]

_PREFIX = "rsi_common.kernel.components."

REGISTRY: dict[str, type[Component]] = {
    _PREFIX + "prompt:SystemPromptComponent": SystemPromptComponent,
    _PREFIX + "context:StandardContextComponent": StandardContextComponent,
    _PREFIX + "control:StandardControlComponent": StandardControlComponent,
    _PREFIX + "output:ParseOutputComponent": ParseOutputComponent,
    _PREFIX + "tools:ToolExposureComponent": ToolExposureComponent,
    _PREFIX + "memory:ArchiveMemoryComponent": ArchiveMemoryComponent,
    _PREFIX + "config:PromptCacheComponent": PromptCacheComponent,
    _PREFIX + "skills:SkillLibraryComponent": SkillLibraryComponent,
}
"""impl string → component class (keys == ``rsi_common.harness.KNOWN_IMPLS``)."""
