"""The numerics both papers share: unit priors, the machine, TAP, adaTAP, sampling, estimators."""
