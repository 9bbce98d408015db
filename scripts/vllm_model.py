"""Writes a GGUF model as a Hugging Face folder that vLLM's CPU build serves: weights
dequantized by transformers (saved as float32, so Q4_1's values stay exact), its tokenizer
with the GGUF's chat template, and a config without the GGUF quantization entry (vLLM would
otherwise look for a GGUF loader).

    python scripts/vllm_model.py MODEL.gguf OUT_DIR

Run by scripts/vllm_setup.sh with the vLLM venv's Python (its transformers, plus gguf).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer


def main(gguf: Path, out: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # The weights are already dequantized (transformers cannot compute in GGUF's formats);
    # what stays is its record that they came from a GGUF, which refuses to save.
    model.hf_quantizer = None
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    config_path = out / "config.json"
    config = json.loads(config_path.read_text())
    config.pop("quantization_config", None)  # written again by some versions: gone for good
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    if not tokenizer.chat_template:
        raise SystemExit(f"{gguf} carries no chat template: vLLM's chat door would refuse")
    print(f"{out}: {model.config.model_type}, {sum(p.numel() for p in model.parameters())} "
          f"parameters, vocabulary {len(tokenizer)}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
