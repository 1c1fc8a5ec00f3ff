"""Meshes and skeletons made from a segmentation: the block grid, the exchange between block
tasks and output-shard tasks, surfaces and their levels of detail, skeletons joined across
blocks. Pure computation over numpy arrays (zmesh, kimimaro, DracoPy); no I/O."""
