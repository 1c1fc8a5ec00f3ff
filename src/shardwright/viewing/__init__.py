"""Looking at datasets: `serve` (the HTTP server), `state` (what `view` shows, as a
Neuroglancer state or link), `viewer` (`view`: the Neuroglancer viewer and screenshots),
`demo` (the README's demo).
"""
