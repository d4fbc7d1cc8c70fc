// etcd for the real-cluster test tier: the embedded server of the etcd
// version kube-apiserver requires, with etcd's own command line.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
