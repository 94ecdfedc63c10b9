//go:build darwin || freebsd || linux || netbsd

package vk

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/ebitengine/purego"
)

// loaderNames are the Vulkan loader's file names, tried in order.
func loaderNames() []string {
	if runtime.GOOS == "darwin" {
		return []string{"libvulkan.1.dylib", "libvulkan.dylib", "libMoltenVK.dylib"}
	}
	return []string{"libvulkan.so.1", "libvulkan.so"}
}

func openLoader() (uintptr, error) {
	var errs []string
	for _, name := range loaderNames() {
		lib, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		sym, err := purego.Dlsym(lib, "vkGetInstanceProcAddr")
		if err != nil {
			return 0, fmt.Errorf("%s has no vkGetInstanceProcAddr: %w", name, err)
		}
		return sym, nil
	}
	return 0, fmt.Errorf("no Vulkan loader found (install libvulkan1 or a GPU driver): %s", strings.Join(errs, "; "))
}
