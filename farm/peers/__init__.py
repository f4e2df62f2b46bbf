"""Other tools' result files read into figures the store keeps apart from the farm's runs:
llama-bench (``-o json|jsonl|csv|sql``), llama.cpp's speed-bench (``--output`` JSON) and
ik_llama.cpp's llama-spec-bench (``--output-format jsonl``). Parsing only: no database."""
