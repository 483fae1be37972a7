"""Other systems' behaviour, pure and versioned: the training operator, torchrun, the kubelet, Run:ai."""
