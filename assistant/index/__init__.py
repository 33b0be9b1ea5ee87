"""The index: generations built by builder.py (atomic, incremental), kept in a local directory or on a Chroma server
(location.py, server.py), opened for reading by snapshot.py; the vector store (store.py), BM25 (keyword.py), the
embedding cache (cache.py) and the embedder identity check (identity.py)."""
