package vk

import (
	"fmt"
	"syscall"
)

func openLoader() (uintptr, error) {
	lib, err := syscall.LoadLibrary("vulkan-1.dll")
	if err != nil {
		return 0, fmt.Errorf("no Vulkan loader found (vulkan-1.dll; install a GPU driver or the Vulkan runtime): %w", err)
	}
	sym, err := syscall.GetProcAddress(lib, "vkGetInstanceProcAddr")
	if err != nil {
		return 0, fmt.Errorf("vulkan-1.dll has no vkGetInstanceProcAddr: %w", err)
	}
	return sym, nil
}
