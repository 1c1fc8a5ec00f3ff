"""What several layers share, importing nothing above it: `vocabulary` (the closed sets of
names), `arrays` (numpy-or-CuPy arrays), `downsample` (pyramid reductions, with `_reduce`),
`deadlines` (the timeout of every outside call), `urls` (how a location is read), `flags`
(an option's command-line flag, help and parser), `lazy` (classes imported on first use).
"""
