// Package rulewalk visits the strings a rule holds, for the checks the
// rules package and the engine make of every name in a rule (UTF-8, length)
// whatever the rule's type.
package rulewalk

import "reflect"

// Strings calls f with every string of v and of what v holds (exported
// struct fields, pointed-to structs, list items, map keys and values), and
// the Go name of the top-level field it is in ("Exceptions" for a key of
// that map, key set). It stops at, and returns, the first error of f.
func Strings(v reflect.Value, f func(field, s string, key bool) error) error {
	return walk(v, "", f)
}

// complexity: a case per reflect.Kind a rule's fields have (struct, pointer, slice, map, string)
func walk(v reflect.Value, field string, f func(field, s string, key bool) error) error {
	switch v.Kind() {
	case reflect.String:
		return f(field, v.String(), false)
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			return walk(v.Elem(), field, f)
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			if err := walk(v.Index(i), field, f); err != nil {
				return err
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if it.Key().Kind() == reflect.String {
				if err := f(field, it.Key().String(), true); err != nil {
					return err
				}
			}
			if err := walk(it.Value(), field, f); err != nil {
				return err
			}
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			sf := v.Type().Field(i)
			if !sf.IsExported() {
				continue
			}
			name := field
			if name == "" {
				name = sf.Name
			}
			if err := walk(v.Field(i), name, f); err != nil {
				return err
			}
		}
	}
	return nil
}

// Clone returns a copy of rule v that shares no memory with it: what its
// pointers, maps and slices hold is copied too (a nil or empty one is kept
// as it is). The engine keeps such copies of the rules it enforces.
func Clone[T any](v T) T {
	c := reflect.New(reflect.TypeOf(v)).Elem()
	clone(c, reflect.ValueOf(v))
	return c.Interface().(T)
}

func clone(dst, src reflect.Value) {
	switch src.Kind() {
	case reflect.Pointer:
		if !src.IsNil() {
			dst.Set(reflect.New(src.Type().Elem()))
			clone(dst.Elem(), src.Elem())
		}
	case reflect.Map:
		if !src.IsNil() {
			dst.Set(reflect.MakeMapWithSize(src.Type(), src.Len()))
			for it := src.MapRange(); it.Next(); {
				e := reflect.New(src.Type().Elem()).Elem()
				clone(e, it.Value())
				dst.SetMapIndex(it.Key(), e)
			}
		}
	case reflect.Slice:
		if !src.IsNil() {
			dst.Set(reflect.MakeSlice(src.Type(), src.Len(), src.Len()))
			for i := 0; i < src.Len(); i++ {
				clone(dst.Index(i), src.Index(i))
			}
		}
	case reflect.Struct:
		for i := 0; i < src.NumField(); i++ {
			if src.Type().Field(i).IsExported() {
				clone(dst.Field(i), src.Field(i))
			}
		}
	default:
		dst.Set(src)
	}
}
