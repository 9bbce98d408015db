"""The llamacpp engine's declaration (engines/kind.py): its options and capabilities,
importable without llama-cpp-python."""

from __future__ import annotations

from ..kind import Capabilities, EngineKind, Option

KIND = EngineKind(
    "llamacpp", "tokenpipe.engines.llamacpp.engine:LlamaCppEngine",
    options=(
        Option("determinism", "str", "exact", choices=("exact", "serial", "fast"),
               model_key="determinism",
               help="llamacpp: exact (default: greedy answers depend on the request "
                    "alone), serial (exact for every weight type, slow) or fast "
                    "(llama.cpp's defaults); see docs/determinism.md"),
        Option("kv_cache", "str", "tiered", choices=("tiered", "shared", "split"),
               help="llamacpp: tiered (default: half of --ctx-size as split streams for "
                    "what fits one, half as one pool a long conversation may fill), "
                    "shared (one pool of --ctx-size cells) or split (--ctx-size / "
                    "--parallel a sequence); see docs/configuration.md"),
        Option("shared_tier_keep_alive", "duration", 300.0, metavar="DURATION",
               help="llamacpp tiered: the shared tier's cells (for conversations longer "
                    "than a split stream) are allocated when one first needs them and "
                    "freed after they are unused this long (\"5m\", 300; default 5m; -1: "
                    "allocated at start, never freed)"),
        Option("prompt_step_ms", "float", 50.0, metavar="MS",
               help="llamacpp: while answers stream, a newcomer's prompt is computed in "
                    "chunks that keep each step within about this long, so a streaming "
                    "answer's next token waits at most about that for it (default 50; 0: "
                    "chunks of 512 tokens, the newcomer's first token sooner)"),
        Option("speculate", "str", "off", choices=("off", "ngram", "draft"),
               model_key="speculate",
               help="llamacpp: speculative decoding; ngram drafts tokens from the prompt "
                    "and the answer so far (no second model), draft with --draft-model; "
                    "drafts are verified in one decode: under --determinism exact the "
                    "answer stays the same, greedy or seeded; see docs/determinism.md "
                    "(default off)"),
        Option("draft_model", "str", None, model_key="draft_model", metavar="NAME",
               names_model=True,
               help="llamacpp --speculate draft: a small model of the same vocabulary "
                    "whose greedy continuation is the draft (a GGUF path or a name "
                    "--model takes; given alone, it means --speculate draft)"),
        Option("speculate_policy", "str", "adaptive", choices=("adaptive", "always"),
               help="llamacpp --speculate: adaptive (default: drafts where the measured "
                    "price of verifying and the recent acceptance promise a gain, one "
                    "stream at a time) or always (every draft found, up to --speculate-draft: for "
                    "measuring)"),
        Option("speculate_draft", "int", 8, metavar="N",
               help="llamacpp --speculate: drafted tokens a step, at most (default 8)"),
    ),
    capabilities=Capabilities(model_files="gguf", constrains=True),
    install_hint="pip install 'tokenpipe[llamacpp]'",
)
