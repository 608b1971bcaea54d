"""Models, datasets, shards, the flat-parameter trainer and the payload stand-in."""
