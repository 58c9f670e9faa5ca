"""A trained run as a merged model folder (lake export-model) or a GGUF file."""
