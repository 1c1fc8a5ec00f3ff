"""Zarr v2, the arrays of levels added to an OME-Zarr 0.4 group (no shards: one object per
chunk): `array` (pure bytes: the `.zarray`, chunks through numcodecs); its driver: `layout`
(the plan: chunk objects, the group's `.zattrs`), `producers` (the engines' step), `driver`.
"""
