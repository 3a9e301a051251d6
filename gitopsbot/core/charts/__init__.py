"""What the chart and the values say, read from text: a chart's metadata, defaults and CRDs
(``chart``), the diffs of values (``values_diff``), CRDs (``crd_diff``) and images
(``images``), the values schema, the hypervisor port's places, the deployed state
(``observed``), the post-renderer's rewrite and the Kubernetes objects the executor judges
(``kube_objects``). Imports only ``core.fleet``.
"""
