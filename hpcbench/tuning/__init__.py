"""hpcbench tune: grids of learning-rate recipes, chosen on the validation split."""
