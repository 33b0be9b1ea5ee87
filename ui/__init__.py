"""HTTP + UI adapter: one FastAPI app (native API under /api, OpenAI-compatible API under /v1, Gradio UI at /).

Nothing here holds answer logic; every route and UI handler calls `assistant.service.AssistantService`.
Entry points: `ui.server.create_app(service)` and `ui.server.serve(settings, host, port)`.
"""
