// A client-go program that does what controllers do to the report API, and
// prints what it saw as JSON: discovery, concurrent patches without a
// resourceVersion, server-side apply by two managers, and a paged list while
// the objects change.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sort"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

var polr = schema.GroupVersionResource{Group: "wgpolicyk8s.io", Version: "v1alpha2", Resource: "policyreports"}

type counting struct {
	mu    sync.Mutex
	paths []string
	next  http.RoundTripper
}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.paths = append(c.paths, r.URL.Path)
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

type result struct {
	DiscoveryPaths  []string `json:"discoveryPaths"`
	DiscoveryGroups []string `json:"discoveryGroups"`
	PatchErrors     []string `json:"patchErrors"`
	PatchedLabels   int      `json:"patchedLabels"`
	ApplyConflict   bool     `json:"applyConflict"`
	ConflictCauses  []string `json:"conflictCauses"`
	ForcedValue     string   `json:"forcedValue"`
	Managers        []string `json:"managers"`
	PagesEqual      bool     `json:"pagesEqual"`
	PagedNames      []string `json:"pagedNames"`
	FullNames       []string `json:"fullNames"`
}

func report(ns, name string, labels map[string]interface{}) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
		"metadata": map[string]interface{}{"name": name, "namespace": ns, "labels": labels},
		"summary":  map[string]interface{}{"pass": int64(1), "fail": int64(0)},
	}}
}

func config(path string) *rest.Config {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		fail(err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	return cfg
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

func main() {
	viaAggregator := flag.String("kubeconfig", "", "kube-apiserver")
	direct := flag.String("direct", "", "the frontend itself")
	ns := flag.String("namespace", "clientgo", "namespace of the reports")
	flag.Parse()
	ctx := context.Background()
	out := result{}

	// discovery straight from the frontend, every request counted
	cfg := config(*direct)
	count := &counting{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { count.next = rt; return count })
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		fail(err)
	}
	groups, _, err := dc.ServerGroupsAndResources()
	if err != nil {
		fail(err)
	}
	out.DiscoveryPaths = count.paths
	for _, g := range groups {
		out.DiscoveryGroups = append(out.DiscoveryGroups, g.Name)
	}

	client, err := dynamic.NewForConfig(config(*viaAggregator))
	if err != nil {
		fail(err)
	}
	reports := client.Resource(polr).Namespace(*ns)

	// 8 writers, 5 merge patches each, none naming a resourceVersion
	if _, err := reports.Create(ctx, report(*ns, "patched", map[string]interface{}{}), metav1.CreateOptions{}); err != nil {
		fail(err)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				patch := fmt.Sprintf(`{"metadata":{"labels":{"w%d-%d":"yes"}}}`, w, i)
				_, err := reports.Patch(ctx, "patched", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
				if err != nil {
					mu.Lock()
					out.PatchErrors = append(out.PatchErrors, err.Error())
					mu.Unlock()
				}
			}
		}(w)
	}
	wg.Wait()
	got, err := reports.Get(ctx, "patched", metav1.GetOptions{})
	if err != nil {
		fail(err)
	}
	out.PatchedLabels = len(got.GetLabels())

	// server-side apply: alice, then bob with another value, then bob forced
	apply := func(manager, team string, force bool) error {
		_, err := reports.Apply(ctx, "applied", report(*ns, "applied", map[string]interface{}{"team": team}),
			metav1.ApplyOptions{FieldManager: manager, Force: force})
		return err
	}
	if err := apply("alice", "a", false); err != nil {
		fail(err)
	}
	err = apply("bob", "b", false)
	out.ApplyConflict = apierrors.IsConflict(err)
	if status, ok := err.(apierrors.APIStatus); ok && status.Status().Details != nil {
		for _, c := range status.Status().Details.Causes {
			out.ConflictCauses = append(out.ConflictCauses, fmt.Sprintf("%s %s: %s", c.Type, c.Field, c.Message))
		}
	}
	if err := apply("bob", "b", true); err != nil {
		fail(err)
	}
	applied, err := reports.Get(ctx, "applied", metav1.GetOptions{})
	if err != nil {
		fail(err)
	}
	out.ForcedValue = applied.GetLabels()["team"]
	for _, m := range applied.GetManagedFields() {
		out.Managers = append(out.Managers, m.Manager+"/"+string(m.Operation))
	}
	sort.Strings(out.Managers)

	// a paged list while objects past the first page change
	pageNs := *ns + "-pages"
	pages := client.Resource(polr).Namespace(pageNs)
	for i := 0; i < 30; i++ {
		if _, err := pages.Create(ctx, report(pageNs, fmt.Sprintf("p%02d", i), map[string]interface{}{}), metav1.CreateOptions{}); err != nil {
			fail(err)
		}
	}
	full, err := pages.List(ctx, metav1.ListOptions{})
	if err != nil {
		fail(err)
	}
	first, err := pages.List(ctx, metav1.ListOptions{Limit: 10})
	if err != nil {
		fail(err)
	}
	if _, err := pages.Patch(ctx, "p15", types.MergePatchType, []byte(`{"metadata":{"labels":{"late":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		fail(err)
	}
	if err := pages.Delete(ctx, "p20", metav1.DeleteOptions{}); err != nil {
		fail(err)
	}
	if _, err := pages.Create(ctx, report(pageNs, "p25a", map[string]interface{}{}), metav1.CreateOptions{}); err != nil {
		fail(err)
	}
	items := first.Items
	token := first.GetContinue()
	for token != "" {
		page, err := pages.List(ctx, metav1.ListOptions{Limit: 10, Continue: token})
		if err != nil {
			fail(err)
		}
		items = append(items, page.Items...)
		token = page.GetContinue()
	}
	out.PagesEqual = len(items) == len(full.Items)
	for i := range items {
		out.PagedNames = append(out.PagedNames, items[i].GetName()+"@"+items[i].GetResourceVersion())
	}
	for i := range full.Items {
		out.FullNames = append(out.FullNames, full.Items[i].GetName()+"@"+full.Items[i].GetResourceVersion())
		if out.PagesEqual && full.Items[i].GetResourceVersion() != items[i].GetResourceVersion() {
			out.PagesEqual = false
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err)
	}
}
