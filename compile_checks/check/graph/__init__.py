"""Pure FX-graph analyses of Inductor's post-grad graph: which copies of graph inputs survive."""
