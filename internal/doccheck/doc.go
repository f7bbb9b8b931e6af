// Package doccheck holds no code: its tests keep the documentation honest.
//
// They read README.md and every Markdown file under docs/.
// TestCodeBlocksCompile compiles every ```go block against the repository;
// TestDocsNameExistingIdentifiers checks that every pkg.Name the documents
// mention, in code or in inline code, is declared by a package of the
// repository; TestDocsCommandsAndPathsExist checks every command (make
// targets, go package paths, cd folders) and every path and link (files,
// folders, heading anchors) against the repository. The conventions are
// described at the top of doccheck_test.go and paths_test.go.
package doccheck
