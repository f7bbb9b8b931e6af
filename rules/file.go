package rules

import (
	"errors"
	"io"
	"os"
)

// DecodeFile decodes the file at path with the default limits; see
// DecodeLimits.DecodeFile.
func DecodeFile(path string) (Set, error) { return DecodeLimits{}.DecodeFile(path) }

// DecodeFile reads the file at path and decodes it with Decode, in the
// format its extension names (see FormatOf). A file over MaxBytes is refused
// by its size, unread. Errors about the content are *PathError values that
// prefix the path; a path naming no regular file (a FIFO) is refused unopened.
func (l DecodeLimits) DecodeFile(path string) (Set, error) {
	f, err := FormatOf(path)
	if err != nil {
		return Set{}, err
	}
	data, err := readFile(path, l.maxBytes())
	if err != nil {
		return Set{}, err
	}
	s, err := l.Decode(data, f)
	if err != nil {
		return Set{}, &PathError{Path: path, Err: err}
	}
	return s, nil
}

// PathError is an error about the content of a rule file: Err (often an
// *Error, reached with errors.As) says what is wrong with the file at Path.
type PathError struct {
	Path string
	Err  error
}

func (e *PathError) Error() string { return e.Path + ": " + e.Err.Error() }

// Unwrap returns Err.
func (e *PathError) Unwrap() error { return e.Err }

// readFile reads the file at path, refusing it unread, as a *PathError,
// when it is no regular file (opening a FIFO waits) or holds over limit bytes.
func readFile(path string, limit int) ([]byte, error) {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, &PathError{Path: path,
			Err: errors.New("rules: not a regular file (only a regular file, or a symbolic link to one, is read)")}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > int64(limit) {
		return nil, &PathError{Path: path, Err: tooLarge(fi.Size(), limit)}
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1)) // the file may have grown
	if err != nil {
		return nil, err
	}
	if len(data) > limit {
		return nil, &PathError{Path: path, Err: tooLarge(int64(len(data)), limit)}
	}
	return data, nil
}
