"""What the apollo11 command offers besides a node: `dev` (etcd and three nodes on
this machine) and `bench`. Nothing a node runs imports this."""
