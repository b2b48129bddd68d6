"""The patchset tool: fetch the pinned PyTorch base, apply the series, build and test the result."""
