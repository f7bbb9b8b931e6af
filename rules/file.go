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
// prefix the path. Only a regular file (or a symbolic link to one) is read:
// a FIFO, device, socket or directory is refused unopened with a *PathError,
// since reading one could block for ever or never end.
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

// errNotRegular is the error of a path that names no regular file.
var errNotRegular = errors.New("not a regular file: only a regular file (or a symbolic link to one) is read as a rule file")

// readFile reads the file at path, refusing it unread, as a *PathError,
// when it is not a regular file or holds more than limit bytes. The type is
// looked at before the file is opened, since opening a FIFO for reading
// blocks until a writer comes, and again on the open file, in case the path
// was replaced in between.
func readFile(path string, limit int) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &PathError{Path: path, Err: errNotRegular}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err == nil && !fi.Mode().IsRegular() {
		return nil, &PathError{Path: path, Err: errNotRegular}
	}
	if err == nil && fi.Size() > int64(limit) {
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
