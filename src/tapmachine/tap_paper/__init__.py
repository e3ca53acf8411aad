"""The first paper's analyses (Tramel et al.): harvested TAP solutions, likelihoods, denoising,
embeddings."""
