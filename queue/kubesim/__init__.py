"""An embedded Kubernetes API emulator with a DRA-aware scheduler and simulated kubelets.

`Emulator` (in `emulator.py`) serves the subset of kube-apiserver that gangq and ordinary
clients use, over HTTP on 127.0.0.1, so kubernetes-asyncio works against it unchanged.
"""
