"""The openai engine's declaration (engines/kind.py): its options and capabilities,
importable without the HTTP client."""

from __future__ import annotations

from ..kind import Capabilities, EngineKind, Option

KIND = EngineKind(
    "openai", "tokenpipe.engines.openai.engine:OpenAIEngine",
    options=(
        Option("upstream", "str", None,
               help="openai engine: upstream base URL(s), comma-separated"),
        Option("upstream_key", "str", None, secret=True,
               help="openai engine: the upstream's API key"),
        Option("upstream_first_token_timeout_s", "float", 60.0,
               help="openai engine: wait this long for a replica's first token (60)"),
        Option("upstream_idle_timeout_s", "float", 30.0,
               help="openai engine: longest silence mid-answer (30)"),
        Option("upstream_mid_answer", "str", "continue", choices=("continue", "fail"),
               help="openai engine: an upstream that fails mid-answer: continue the "
                    "answer on another (upstreams that continue a last assistant message: "
                    "vLLM, llama-server, tokenpipe), or fail it with engine_error "
                    "(continue)"),
    ),
    # `--model NAME=openai:URL` names the upstream; the upstream renders its own prompts
    capabilities=Capabilities(spec_option="upstream", renders_prompts=False),
)
