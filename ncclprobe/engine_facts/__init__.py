"""What the serving engines (SGLang, vLLM) do, as their sources and documents state it: one row per
fact, each with its source. Rules read these rows; no engine fact lives in a rule."""
