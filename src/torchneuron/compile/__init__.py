"""torch.compile(backend="neuron") and the FX -> jax interpreter."""
