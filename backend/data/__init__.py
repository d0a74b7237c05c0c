"""Datasets a user adds: what a file holds (inspect.py) and RocBoard's own dataset folder
(registry.py), a LLaMA-Factory dataset_dir under the runs dir."""
