"""The official documentation corpus: `corpus/sources.yaml` (what to take from which upstream repository at
which commit, under which licence) and `assistant corpus sync`, which fetches those files into the local docs
cache that the default index includes. `manifest` reads the manifest and makes the upstream links; `sync`
fetches (git or a mirror folder), verifies, writes the cache atomically and keeps its lock."""
