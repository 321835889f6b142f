"""The simulated OpenAI-compatible engine: tokenizer, chat template, scheduler, HTTP server and
metrics, over proxy.cachemodel.
"""
