// Command validate checks Kubernetes manifests against the Kubernetes API types, strictly:
// every document of every file given is decoded into the Go type of its apiVersion and
// kind (k8s.io/api) with sigs.k8s.io/yaml's strict decoding, so an unknown or misspelt
// field, a value of the wrong type or a duplicate key is an error, as the API server's
// strict field validation would report it. Then a few rules the types cannot express:
// a StatefulSet's selector matches its pod labels and names a headless Service of the
// same files, every container has startup, liveness and readiness probes, and every
// ConfigMap, Secret and claim a pod names is in the files or in its volume claim templates.
//
// Usage: go run . FILE... ; prints one line per document and exits 1 on the first error
// of each document, 0 when all are valid. Used by tests/deploy/test_kubernetes_api_types.py.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// One file's objects by kind, for the rules that cross documents.
type objects struct {
	services     map[string]*corev1.Service
	configMaps   map[string]bool
	secrets      map[string]bool
	claims       map[string]bool
	statefulSets []*appsv1.StatefulSet
	pods         []*corev1.Pod
}

func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	return scheme, nil
}

func documents(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var found [][]byte
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return found, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			found = append(found, doc)
		}
	}
}

func stripComments(doc []byte) []byte {
	var kept [][]byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			kept = append(kept, line)
		}
	}
	return bytes.Join(kept, []byte("\n"))
}

// decode strictly into the registered type of the document's apiVersion and kind.
func decode(scheme *runtime.Scheme, doc []byte) (runtime.Object, error) {
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return nil, fmt.Errorf("not a Kubernetes object: %w", err)
	}
	gvk := schema.FromAPIVersionAndKind(meta.APIVersion, meta.Kind)
	object, err := scheme.New(gvk)
	if err != nil {
		return nil, fmt.Errorf("unknown apiVersion/kind %s/%s: %w", meta.APIVersion, meta.Kind, err)
	}
	if err := yaml.UnmarshalStrict(doc, object); err != nil {
		return nil, fmt.Errorf("%s: %w", meta.Kind, err)
	}
	return object, nil
}

func (o *objects) add(object runtime.Object) string {
	switch v := object.(type) {
	case *corev1.Service:
		o.services[v.Name] = v
		return "Service/" + v.Name
	case *corev1.ConfigMap:
		o.configMaps[v.Name] = true
		return "ConfigMap/" + v.Name
	case *corev1.Secret:
		o.secrets[v.Name] = true
		return "Secret/" + v.Name
	case *corev1.PersistentVolumeClaim:
		o.claims[v.Name] = true
		return "PersistentVolumeClaim/" + v.Name
	case *appsv1.StatefulSet:
		o.statefulSets = append(o.statefulSets, v)
		return "StatefulSet/" + v.Name
	case *corev1.Pod:
		o.pods = append(o.pods, v)
		return "Pod/" + v.Name
	case *policyv1.PodDisruptionBudget:
		return "PodDisruptionBudget/" + v.Name
	}
	return fmt.Sprintf("%T", object)
}

func checkPod(spec *corev1.PodSpec, o *objects, templates map[string]bool) []string {
	var problems []string
	for _, c := range spec.Containers {
		if c.StartupProbe == nil || c.LivenessProbe == nil || c.ReadinessProbe == nil {
			problems = append(problems, fmt.Sprintf("container %s lacks a probe", c.Name))
		}
		for _, env := range c.Env {
			if env.ValueFrom != nil && env.ValueFrom.SecretKeyRef != nil {
				name := env.ValueFrom.SecretKeyRef.Name
				// kube play variants make the secret outside the file (deploy.kubernetes.play).
				if !o.secrets[name] && len(o.pods) == 0 {
					problems = append(problems, fmt.Sprintf("env %s: no Secret %s", env.Name, name))
				}
			}
		}
		for _, mount := range c.VolumeMounts {
			found := templates[mount.Name]
			for _, volume := range spec.Volumes {
				found = found || volume.Name == mount.Name
			}
			if !found {
				problems = append(problems, fmt.Sprintf("mount %s: no such volume", mount.Name))
			}
		}
	}
	for _, volume := range spec.Volumes {
		if volume.ConfigMap != nil && !o.configMaps[volume.ConfigMap.Name] {
			problems = append(problems, "no ConfigMap "+volume.ConfigMap.Name)
		}
		if volume.PersistentVolumeClaim != nil && !o.claims[volume.PersistentVolumeClaim.ClaimName] {
			problems = append(problems, "no claim "+volume.PersistentVolumeClaim.ClaimName)
		}
	}
	return problems
}

func (o *objects) check() []string {
	var problems []string
	for _, set := range o.statefulSets {
		selector, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
		if err != nil || !selector.Matches(labels.Set(set.Spec.Template.Labels)) {
			problems = append(problems, set.Name+": selector does not match the pod labels")
		}
		service := o.services[set.Spec.ServiceName]
		if service == nil || service.Spec.ClusterIP != corev1.ClusterIPNone {
			problems = append(problems, set.Name+": serviceName is no headless Service here")
		}
		templates := map[string]bool{}
		for _, claim := range set.Spec.VolumeClaimTemplates {
			templates[claim.Name] = true
		}
		for _, p := range checkPod(&set.Spec.Template.Spec, o, templates) {
			problems = append(problems, set.Name+": "+p)
		}
	}
	for _, pod := range o.pods {
		for _, p := range checkPod(&pod.Spec, o, nil) {
			problems = append(problems, pod.Name+": "+p)
		}
	}
	return problems
}

func main() {
	scheme, err := newScheme()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	failed := false
	for _, path := range os.Args[1:] {
		docs, err := documents(path)
		if err != nil {
			fmt.Printf("%s: %v\n", path, err)
			failed = true
			continue
		}
		o := &objects{
			services: map[string]*corev1.Service{}, configMaps: map[string]bool{},
			secrets: map[string]bool{}, claims: map[string]bool{},
		}
		for i, doc := range docs {
			object, err := decode(scheme, doc)
			if err != nil {
				fmt.Printf("%s: document %d: %v\n", path, i+1, err)
				failed = true
				continue
			}
			fmt.Printf("%s: ok %s\n", path, o.add(object))
		}
		for _, problem := range o.check() {
			fmt.Printf("%s: %s\n", path, problem)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}
