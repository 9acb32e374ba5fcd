"""The knowledge base on a real pretrained model: one shared store for every FFN, what it
costs, and editing facts through it (`modformer knowledge-pretrained`)."""
