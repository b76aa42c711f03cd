"""An OpenAI-compatible emulation server timed by servesim's engine (``servesim emulate``).

``tokens``: prompt token counts and prefix-cache block hashes without a tokenizer download.
``protocol``: the request bodies vLLM's OpenAI server accepts and the chunks it streams.
``emulator``: the fleet on a wall clock (Ray-independent): submit, stream, abort, fail, metrics.
``app``: the FastAPI app (endpoints, auth, limits). ``ray_serve``: the app as a Ray Serve ingress.
Ray is imported only by ``ray_serve`` (``servesim --help`` stays fast).
"""
