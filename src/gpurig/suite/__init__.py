"""The main job, `gpurig check`, as a library: the doctor, then verify, a short `bench comm` and a
short `bench train`, each a step with a status and a reason, returned as one document that
`report/` prints and renders. Sits above the jobs (`train/`, `comm/`) it runs and below `report/`."""
