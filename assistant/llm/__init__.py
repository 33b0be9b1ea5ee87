"""Chat models: the ChatModel interface (base.py), the engines (llama.cpp, transformers, an OpenAI-compatible server,
scripted), chosen by factory.py; the packaged GGUF models (models.py), the engine build (wheelhouse.py) and its
self-check (selfcheck.py)."""
