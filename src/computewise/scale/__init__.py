"""Hand jobs to engines teams already trust (Ray, Kubernetes, Slurm, SkyPilot), sized and priced by computewise."""
