"""The answer pipeline's parts: follow-up rewriting, refusal policy, prompt building, citation checking."""
