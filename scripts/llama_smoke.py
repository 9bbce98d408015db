"""Exit 0 when llama-cpp-python decodes a token of the bundled model on this CPU (setup.sh
runs it after install; a build for another CPU dies here, not in the first request)."""

import llama_cpp as lc
from llama_cpp import _logger

from tokenpipe.engines.base import bundled_model_path

_logger.set_verbose(False)
lc.llama_backend_init()
model = lc.llama_model_load_from_file(str(bundled_model_path()).encode(),
                                      lc.llama_model_default_params())
assert model, "the model did not load"
params = lc.llama_context_default_params()
params.n_ctx = 256
ctx = lc.llama_init_from_model(model, params)
assert ctx, "no context"
# a prompt-sized batch, then one token: batched and single-row matmul kernels both run
# (a build with kernels this CPU cannot run died only on the batch)
# the token arrays are named: a batch holds only a pointer to them (an inline array was
# freed before llama_decode read it, and the smoke failed at random: "invalid token")
tokens = [(7 + 13 * i) % 1000 + 1 for i in range(128)]
ids = (lc.llama_token * len(tokens))(*tokens)
batch = lc.llama_batch_get_one(ids, len(tokens))
assert lc.llama_decode(ctx, batch) == 0, "llama_decode of a batch failed"
one = (lc.llama_token * 1)(5)
batch = lc.llama_batch_get_one(one, 1)
assert lc.llama_decode(ctx, batch) == 0, "llama_decode of one token failed"
lc.llama_free(ctx)
lc.llama_model_free(model)
print("llama.cpp runs on this CPU")
