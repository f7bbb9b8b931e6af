// Package doccheck holds no code: its tests keep the documentation honest.
//
// TestCodeBlocksCompile compiles every ```go block of README.md and
// docs/*.md against the repository; TestDocsNameExistingIdentifiers checks
// that every pkg.Name the documents mention, in code or in inline code, is
// declared by a package of the repository. The conventions are described at
// the top of doccheck_test.go.
package doccheck
