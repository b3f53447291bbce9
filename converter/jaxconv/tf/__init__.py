"""TensorFlow targets: SavedModel via jax2tf, TFLite conversion."""
