// Command apivalidation validates CRD files with the Kubernetes API server's own
// CustomResourceDefinition validation (structural schema, list-map keys, CEL
// compilation and cost), which the Python emulator only approximates.
package main

import (
	"context"
	"fmt"
	"os"

	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	v1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
)

func main() {
	scheme := runtime.NewScheme()
	_ = v1.AddToScheme(scheme)
	_ = apiext.AddToScheme(scheme)
	failed := false
	for _, path := range os.Args[1:] {
		f, err := os.Open(path)
		if err != nil {
			panic(err)
		}
		var crd v1.CustomResourceDefinition
		if err := yaml.NewYAMLOrJSONDecoder(f, 1<<20).Decode(&crd); err != nil {
			panic(err)
		}
		v1.SetObjectDefaults_CustomResourceDefinition(&crd)
		var internal apiext.CustomResourceDefinition
		if err := scheme.Convert(&crd, &internal, nil); err != nil {
			panic(err)
		}
		errs := validation.ValidateCustomResourceDefinition(context.Background(), &internal)
		for _, e := range errs {
			fmt.Printf("%s: %v\n", path, e)
			failed = true
		}
		if len(errs) == 0 {
			fmt.Printf("%s: valid\n", path)
		}
	}
	if failed {
		os.Exit(1)
	}
}
