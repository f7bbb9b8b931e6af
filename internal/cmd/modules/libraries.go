package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// compileSteps are standalone -compile's go commands in a module's folder:
// go build of its packages other than commands (package main) and
// folders of test files only, which compiles them without linking, then go
// vet, which type-checks every package with its tests, commands included. Linking the commands again
// (32 of them) was most of what go build added to go vet; the consumer
// check links and runs the published modules' examples outside the
// workspace, and the race stage links every test binary.
func compileSteps(dir string, env []string) ([][]string, error) {
	cmd := exec.Command(goCmd(), "list", "-f", `{{if and (ne .Name "main") (or .GoFiles .CgoFiles)}}{{.ImportPath}}{{end}}`, "./...")
	cmd.Dir, cmd.Env, cmd.Stderr = dir, env, os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("in %s: go list: %w", dir, err)
	}
	var steps [][]string
	if libs := strings.Fields(string(out)); len(libs) > 0 {
		steps = append(steps, append([]string{"build"}, libs...))
	}
	return append(steps, []string{"vet", "./..."}), nil
}
