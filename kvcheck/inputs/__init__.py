"""Everything kvcheck reads from users: the manifest, the fleet file, deployment files."""
