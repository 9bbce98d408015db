"""The transformers engine's declaration (engines/kind.py): its options and capabilities,
importable without torch or transformers."""

from __future__ import annotations

from ..kind import Capabilities, EngineKind, Option

KIND = EngineKind(
    "transformers", "tokenpipe.engines.transformers.engine:TransformersEngine",
    options=(
        Option("device", "str", None, model_key="device",
               help="transformers engine: cpu, cuda or auto"),
    ),
    capabilities=Capabilities(model_files="any", constrains=True),
    install_hint="pip install 'tokenpipe[transformers]' (CPU torch: pip install torch==2.13.0)",
)
