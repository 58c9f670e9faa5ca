"""Supervised fine-tuning and instruction tuning: the typed configs, the data (lake views, exports, files), the
training loop, one or many processes, and DPO."""
