"""Answer evaluation: every question of a SQuAD-format file through the product's pipeline, scored."""
