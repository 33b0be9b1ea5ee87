"""Framework Advisor (框架选型助手): a local, bilingual, cited assistant for choosing AI training frameworks.

The core package: ingestion, index, retrieval, answers and the service object every adapter calls.
It never imports gradio, fastapi or the `ui` package.
"""
__version__ = "0.1.0"
