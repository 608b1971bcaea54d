"""Models, datasets, shards and the flat-parameter trainer."""
